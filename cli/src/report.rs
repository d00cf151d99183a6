//! How failures reach the user: the exit status, and one line per error on
//! standard error, plain text or (under `--json`) a JSON object.

use serde_json::{Map, Value, json};
use sluice_client::Error;

use crate::render::entry_error_line;

/// Everything asked for was done.
pub const EXIT_OK: u8 = 0;
/// A request failed, or part of one did.
pub const EXIT_FAILED: u8 = 1;
/// The command line could not be used as given.
pub const EXIT_USAGE: u8 = 2;
/// A second Ctrl-C (or SIGTERM) while `tail` or `ping` was finishing.
pub const EXIT_INTERRUPTED: u8 = 130;

/// Every exit status and what it means, for `--help` and the man page.
pub const EXIT_STATUSES: [(u8, &str); 4] = [
    (
        EXIT_OK,
        "success; tail and ping also end with 0 after Ctrl-C or SIGTERM \
         if nothing failed",
    ),
    (
        EXIT_FAILED,
        "a request failed, or part of one did: an entry of a batch, one broker of several, \
         a lost ping, a receive that tail retried (each failure is on standard error)",
    ),
    (
        EXIT_USAGE,
        "usage: bad flags or arguments; a token file, TLS file or standard input \
         that cannot be read or used; an unwritable man --out-dir",
    ),
    (
        EXIT_INTERRUPTED,
        "a second Ctrl-C or SIGTERM while tail or ping was finishing \
         (the leases tail holds come back at once)",
    ),
];

/// How errors are shown, laid out for a terminal.
pub const ERROR_FORMAT_HELP: &str = "\
Errors go to standard error, one per line, starting with their name:
  QueueNotFound: the queue does not exist
With --json each is one JSON object on a line of standard error instead:
  {\"error\": {\"kind\": \"QueueNotFound\", \"message\": \"the queue does not exist\", \"retryable\": false}}
\"retryable\" says whether the same request may succeed later as it is (Busy,
QueueFull, Timeout, Connect, ...). A failed entry of a batch adds \"subject\"
(its receipt or queue); a broker that did not answer adds \"broker\".
Standard output holds only results, so it stays parseable.";

/// Help text width.
const HELP_COLUMNS: usize = 78;

/// The end of `--help`: the exit statuses and the error format.
pub fn exit_status_help() -> String {
    let mut out = String::from("Exit status:\n");
    let indent = 7;
    for (code, meaning) in EXIT_STATUSES {
        let mut line = format!("  {code:<4} ");
        for word in meaning.split_whitespace() {
            if line.len() > indent && line.len() + 1 + word.len() > HELP_COLUMNS {
                out.push_str(line.trim_end());
                out.push('\n');
                line = " ".repeat(indent);
            } else if line.len() > indent {
                line.push(' ');
            }
            line.push_str(word);
        }
        out.push_str(&line);
        out.push('\n');
    }
    out.push('\n');
    out.push_str(ERROR_FORMAT_HELP);
    out
}

/// An error's description without its leading name.
fn message_of(err: &Error) -> String {
    let shown = err.to_string();
    match shown
        .strip_prefix(err.name())
        .and_then(|s| s.strip_prefix(": "))
    {
        Some(rest) => rest.to_owned(),
        None => shown,
    }
}

/// `{"error": {"kind": ..., "message": ..., "retryable": ...}}` plus any
/// extra fields.
pub fn error_json(kind: &str, message: &str, retryable: bool, extra: &[(&str, &str)]) -> Value {
    let mut error = Map::new();
    error.insert("kind".into(), json!(kind));
    error.insert("message".into(), json!(message));
    error.insert("retryable".into(), json!(retryable));
    for (k, v) in extra {
        error.insert((*k).into(), json!(v));
    }
    json!({ "error": error })
}

fn client_error_json(err: &Error, extra: &[(&str, &str)]) -> Value {
    error_json(err.name(), &message_of(err), err.is_retryable(), extra)
}

/// A failure that stopped the command.
pub fn client_error(err: &Error, json: bool) {
    if json {
        eprintln!("{}", client_error_json(err, &[]));
    } else {
        eprintln!("{err}");
    }
}

/// A usage problem found after the command line was parsed.
pub fn usage_error(message: &str, json: bool) {
    if json {
        eprintln!("{}", error_json("Usage", message, false, &[]));
    } else {
        eprintln!("sluice: {message}");
    }
}

/// A failed entry of a batch; `subject` is what it concerned (a receipt,
/// the queue).
pub fn entry_error(err: &Error, subject: &str, json: bool) {
    if json {
        eprintln!("{}", client_error_json(err, &[("subject", subject)]));
    } else {
        eprintln!("{}", entry_error_line(err, subject));
    }
}

/// A broker of several that did not answer.
pub fn broker_error(addr: &str, err: &Error, json: bool) {
    if json {
        eprintln!("{}", client_error_json(err, &[("broker", addr)]));
    } else {
        eprintln!("broker {addr}: {err}");
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn json_errors_name_the_kind_and_whether_to_retry() {
        let e = Error::QueueNotFound("queue not found: q".into());
        let v = client_error_json(&e, &[]);
        assert_eq!(
            v,
            json!({"error": {"kind": "QueueNotFound", "message": "queue not found: q", "retryable": false}})
        );
        let v = client_error_json(&Error::Busy(String::new()), &[("broker", "127.0.0.1:1")]);
        assert_eq!(v["error"]["kind"], "Busy");
        assert_eq!(v["error"]["retryable"], true);
        assert_eq!(v["error"]["broker"], "127.0.0.1:1");
        assert_eq!(
            v["error"]["message"],
            "the broker's memory budget is spent: retry later"
        );
        let v = client_error_json(&Error::Timeout(std::time::Duration::from_secs(1)), &[]);
        assert_eq!(v["error"]["kind"], "Timeout");
        assert_eq!(v["error"]["retryable"], true);
        let v = client_error_json(&Error::StaleReceipt(String::new()), &[]);
        assert_eq!(v["error"]["retryable"], false);
    }

    #[test]
    fn the_help_lists_every_exit_status_within_its_width() {
        let help = exit_status_help();
        for code in [EXIT_OK, EXIT_FAILED, EXIT_USAGE, EXIT_INTERRUPTED] {
            let listed = help
                .lines()
                .any(|l| l.trim_start().starts_with(&format!("{code} ")));
            assert!(listed, "exit status {code} is not in the help:\n{help}");
        }
        let statuses = help.split("\n\n").next().unwrap();
        for line in statuses.lines() {
            assert!(line.len() <= HELP_COLUMNS, "{line:?}");
        }
        assert!(help.contains("an unwritable man --out-dir"), "{help}");
    }
}
