//! Holds no code: the package exists for `tests/ui.rs`.
