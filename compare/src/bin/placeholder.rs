//! Placeholder so the crate builds until the comparison binaries land.
fn main() {}
