//! The `sluice` command's value parsing, as a library: the binary
//! (`src/main.rs`) parses its flags with these functions, and tests elsewhere
//! in the workspace call them to check that `sluice` reads durations, sizes
//! and addresses exactly as `sluice-server` and `sluice-loadgen` do.

pub mod units;
