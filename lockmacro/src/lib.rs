//! The `#[distributed_lock]` attribute. Use it through `lockmacro-runtime`.
