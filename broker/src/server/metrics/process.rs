//! The standard `process_*` metrics, read from `/proc/self` on each scrape
//! (as Prometheus client libraries do): CPU time, resident and virtual
//! memory, open and maximum file descriptors, start time. A value that
//! cannot be read is left out of the exposition, never made up.

use std::fs;

use crate::io;

/// What `/proc` says about this process; `None` where it could not be read.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct ProcessStats {
    /// User and system CPU time, seconds.
    pub cpu_seconds: Option<f64>,
    /// Resident set size, bytes.
    pub resident_bytes: Option<u64>,
    /// Virtual memory size, bytes.
    pub virtual_bytes: Option<u64>,
    /// Open file descriptors.
    pub open_fds: Option<u64>,
    /// The soft open-files limit.
    pub max_fds: Option<u64>,
    /// Start time since the Unix epoch, seconds.
    pub start_time_seconds: Option<f64>,
}

/// The fields of `/proc/<pid>/stat` this module reads.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
struct Stat {
    utime_ticks: u64,
    stime_ticks: u64,
    start_ticks: u64,
    vsize_bytes: u64,
    rss_pages: u64,
}

/// Parses `/proc/<pid>/stat`. The command name (field 2) is in parentheses
/// and may hold spaces and parentheses itself, so fields are counted from
/// the last `)`.
fn parse_stat(text: &str) -> Option<Stat> {
    let after = &text[text.rfind(')')? + 1..];
    // Field 3 (state) is index 0.
    let fields: Vec<&str> = after.split_ascii_whitespace().collect();
    let field = |n: usize| fields.get(n - 3)?.parse::<u64>().ok();
    Some(Stat {
        utime_ticks: field(14)?,
        stime_ticks: field(15)?,
        start_ticks: field(22)?,
        vsize_bytes: field(23)?,
        rss_pages: field(24)?,
    })
}

/// The boot time (`btime`) from `/proc/stat`, seconds since the epoch.
fn parse_boot_time(text: &str) -> Option<u64> {
    text.lines()
        .find_map(|l| l.strip_prefix("btime "))
        .and_then(|v| v.trim().parse().ok())
}

/// Reads this process's figures now.
pub fn read() -> ProcessStats {
    let (page, ticks) = io::proc_units();
    #[allow(clippy::cast_precision_loss, reason = "ticks to seconds")]
    let secs = |t: u64| t as f64 / ticks as f64;
    let stat = fs::read_to_string("/proc/self/stat")
        .ok()
        .as_deref()
        .and_then(parse_stat);
    let boot = fs::read_to_string("/proc/stat")
        .ok()
        .as_deref()
        .and_then(parse_boot_time);
    let open_fds = fs::read_dir("/proc/self/fd")
        .ok()
        .map(|d| d.filter(Result::is_ok).count() as u64);
    #[allow(clippy::cast_precision_loss, reason = "seconds since the epoch")]
    ProcessStats {
        cpu_seconds: stat.map(|s| secs(s.utime_ticks.saturating_add(s.stime_ticks))),
        resident_bytes: stat.map(|s| s.rss_pages.saturating_mul(page)),
        virtual_bytes: stat.map(|s| s.vsize_bytes),
        open_fds,
        max_fds: io::open_files_limit().ok().map(|(soft, _)| soft),
        start_time_seconds: stat
            .zip(boot)
            .map(|(s, boot)| boot as f64 + secs(s.start_ticks)),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn stat_lines_parse_even_with_odd_command_names() {
        let line = "4242 (sluice) (x) 1) S 1 4242 4242 0 -1 4194560 900 0 0 0 \
                    250 75 0 0 20 0 5 0 123456 987654321 2048 18446744073709551615 \
                    1 1 0 0 0 0 0 0 0 0 0 0 17 3 0 0 0 0 0";
        let s = parse_stat(line).expect("parses");
        assert_eq!(
            s,
            Stat {
                utime_ticks: 250,
                stime_ticks: 75,
                start_ticks: 123_456,
                vsize_bytes: 987_654_321,
                rss_pages: 2048,
            }
        );
        for bad in [
            "",
            "4242 (sluice S 1",
            "4242 (sluice) S 1 2 3",
            "x) S a b c d e f g h i j k l m n o p q r s t u v",
        ] {
            assert_eq!(parse_stat(bad), None, "{bad:?}");
        }
    }

    #[test]
    fn boot_time_is_found() {
        assert_eq!(
            parse_boot_time("cpu  1 2 3\nintr 5\nbtime 1764547200\nprocesses 9\n"),
            Some(1_764_547_200)
        );
        assert_eq!(parse_boot_time("cpu 1\n"), None);
        assert_eq!(parse_boot_time("btime soon\n"), None);
    }

    #[test]
    fn this_process_is_read() {
        let p = read();
        assert!(p.cpu_seconds.is_some_and(|c| c >= 0.0));
        assert!(p.resident_bytes.is_some_and(|r| r > 0));
        assert!(p.virtual_bytes >= p.resident_bytes);
        assert!(p.open_fds.is_some_and(|n| n >= 3));
        assert!(p.max_fds >= p.open_fds);
        let now = std::time::SystemTime::now()
            .duration_since(std::time::UNIX_EPOCH)
            .unwrap()
            .as_secs_f64();
        let start = p.start_time_seconds.expect("start time");
        assert!(
            start <= now + 1.0 && start > now - 86_400.0 * 365.0,
            "{start} vs {now}"
        );
    }
}
