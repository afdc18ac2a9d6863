//! Text formats (to be written).
