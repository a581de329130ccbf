//! Structural classification (fallback): from key shapes and step structure.
