//! Simulated disk (placeholder; see the crash-safety suite).
