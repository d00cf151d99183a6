//! Shared fixtures for sluice's criterion benchmarks.
