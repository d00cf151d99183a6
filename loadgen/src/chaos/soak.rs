//! Soak (being written).
use super::{ChaosError, Ctx};
use serde::Serialize;
use std::time::Duration;
/// Soak spec.
#[derive(Debug, Clone)]
pub struct SoakSpec {
    pub duration: Duration,
    pub sample_every: Duration,
    pub warmup: Duration,
    pub rate: u32,
}
/// Soak report.
#[derive(Debug, Serialize)]
pub struct SoakReport {
    pub violations: Vec<String>,
}
/// Run.
pub fn run(_ctx: &Ctx, _s: &SoakSpec) -> Result<SoakReport, ChaosError> {
    Err(ChaosError::Setup("soak".into()))
}
/// Table.
pub fn table(_r: &SoakReport) -> String {
    String::new()
}
