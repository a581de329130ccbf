//! (reference loops: next)
