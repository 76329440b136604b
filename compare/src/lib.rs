//! Shared pieces of the side-by-side comparisons with Dynamo (`src/bin/*`).
