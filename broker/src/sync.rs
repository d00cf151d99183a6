//! Sync facade: loom's types under `cfg(sluice_loom)`, std's otherwise, so the
//! same code is the production type and the loom model.
