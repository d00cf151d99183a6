//! The exposition writer and the histograms, without a server (the
//! endpoint's HTTP is `server/metrics_session.rs`, tested there and over
//! sockets in `broker/tests/it/server_metrics_http.rs`).

use super::*;

use std::time::Duration;

#[test]
fn shard_histograms_merge_into_one_family() {
    let mut shards: Vec<LatencyHistogram> = (0..2).map(|_| LatencyHistogram::new()).collect();
    let readers: Vec<HistogramReader> = shards.iter().map(LatencyHistogram::reader).collect();
    shards[0].record(Duration::from_micros(30));
    shards[1].record(Duration::from_millis(30));
    shards[1].record(Duration::from_secs(120));
    let mut merged = HistogramSnapshot::default();
    for reader in &readers {
        merged.merge(&reader.snapshot());
    }
    let mut body = String::new();
    PromWriter::new(&mut body)
        .family(
            "sluice_request_duration_seconds",
            "Request latency.",
            MetricType::Histogram,
        )
        .histogram(&[("op", "send")], &merged);
    assert!(
        body.contains("sluice_request_duration_seconds_bucket{op=\"send\",le=\"0.00005\"} 1\n")
    );
    assert!(body.contains("sluice_request_duration_seconds_bucket{op=\"send\",le=\"0.05\"} 2\n"));
    assert!(body.contains("sluice_request_duration_seconds_bucket{op=\"send\",le=\"60\"} 2\n"));
    assert!(body.contains("sluice_request_duration_seconds_bucket{op=\"send\",le=\"+Inf\"} 3\n"));
    assert!(
        body.contains("sluice_request_duration_seconds_count{op=\"send\"} 3\n"),
        "{body}"
    );
}

#[test]
fn histograms_of_any_buckets_are_cumulative_and_end_at_the_count() {
    let mut out = String::new();
    PromWriter::new(&mut out)
        .family("t_seconds", "T.", MetricType::Histogram)
        .histogram_buckets(
            &[("op", "send")],
            &REQUEST_BUCKET_BOUNDS_NANOS[..3],
            &[2, 0, 1, 4, 5],
            1.5,
        );
    assert_eq!(
        out,
        "# HELP t_seconds T.\n# TYPE t_seconds histogram\n\
         t_seconds_bucket{op=\"send\",le=\"0.000001\"} 2\n\
         t_seconds_bucket{op=\"send\",le=\"0.000002\"} 2\n\
         t_seconds_bucket{op=\"send\",le=\"0.000004\"} 3\n\
         t_seconds_bucket{op=\"send\",le=\"+Inf\"} 12\n\
         t_seconds_sum{op=\"send\"} 1.5\n\
         t_seconds_count{op=\"send\"} 12\n"
    );
}
