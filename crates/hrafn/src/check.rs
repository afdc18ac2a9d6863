//! Whole-environment integrity check (placeholder, filled in below).
