//! Output: aligned tables for people, JSON for programs, and the error
//! lines on standard error.

use base64::Engine as _;
use serde_json::{Map, Value, json};
use sluice_client::{
    Error, MessageAttributes, PeekedMessage, QueueAttributes, QueueInfo, QueueStats,
    ReceivedMessage, ServerStatsReply,
};

use crate::time::rfc3339_ms;
use sluice_cli::units::format_ms;
use sluice_protocol::units::format_bytes;

/// A table with a header row; columns are as wide as their widest cell,
/// two spaces apart, and the last column is not padded.
#[derive(Debug)]
pub struct Table {
    header: Vec<String>,
    rows: Vec<Vec<String>>,
}

impl Table {
    pub fn new(header: &[&str]) -> Table {
        Table {
            header: header.iter().map(|h| (*h).to_owned()).collect(),
            rows: Vec::new(),
        }
    }

    pub fn row(&mut self, cells: Vec<String>) {
        debug_assert_eq!(cells.len(), self.header.len());
        self.rows.push(cells);
    }

    pub fn render(&self) -> String {
        let columns = self.header.len();
        let mut widths = vec![0usize; columns];
        for row in std::iter::once(&self.header).chain(&self.rows) {
            for (w, cell) in widths.iter_mut().zip(row) {
                *w = (*w).max(cell.chars().count());
            }
        }
        let mut out = String::new();
        for row in std::iter::once(&self.header).chain(&self.rows) {
            let mut line = String::new();
            for (i, (cell, w)) in row.iter().zip(&widths).enumerate() {
                if i + 1 == columns {
                    line.push_str(cell);
                } else {
                    line.push_str(cell);
                    let pad = w - cell.chars().count() + 2;
                    line.extend(std::iter::repeat_n(' ', pad));
                }
            }
            out.push_str(line.trim_end());
            out.push('\n');
        }
        out
    }
}

/// A body for a table cell: its text with control characters escaped, or
/// its size when it is not UTF-8.
pub fn body_cell(body: &[u8]) -> String {
    match std::str::from_utf8(body) {
        Ok(text) => text.escape_debug().to_string(),
        Err(_) => format!("<{} bytes, not UTF-8>", body.len()),
    }
}

pub fn attributes_cell(attributes: &MessageAttributes) -> String {
    attributes
        .iter()
        .map(|(k, v)| format!("{k}={v}"))
        .collect::<Vec<_>>()
        .join(",")
}

fn attributes_json(attributes: &MessageAttributes) -> Value {
    let mut map = Map::new();
    for (k, v) in attributes {
        // Keys may repeat on the wire; the first one wins here.
        map.entry(k.to_owned()).or_insert_with(|| json!(v));
    }
    Value::Object(map)
}

fn put_body(object: &mut Map<String, Value>, body: &[u8]) {
    match std::str::from_utf8(body) {
        Ok(text) => object.insert("body".into(), json!(text)),
        Err(_) => object.insert(
            "body_base64".into(),
            json!(base64::engine::general_purpose::STANDARD.encode(body)),
        ),
    };
}

pub fn received_json(m: &ReceivedMessage) -> Value {
    let mut o = Map::new();
    o.insert("id".into(), json!(m.id.to_string()));
    o.insert("receipt".into(), json!(m.receipt.to_hex()));
    put_body(&mut o, &m.body);
    o.insert("receive_count".into(), json!(m.receive_count));
    o.insert("delivery".into(), json!(m.delivery()));
    put_times(&mut o, m.sent_at_ms, Some(m.first_received_at_ms()));
    o.insert("attributes".into(), attributes_json(&m.attributes));
    o.insert(
        "group".into(),
        json!(m.group.as_ref().map(sluice_client::MessageGroupId::as_str)),
    );
    Value::Object(o)
}

/// A message's times, as RFC 3339 text (`sent_at`) and as milliseconds
/// since the epoch for arithmetic (`sent_at_ms`).
fn put_times(object: &mut Map<String, Value>, sent_at_ms: u64, first_received_at_ms: Option<u64>) {
    object.insert("sent_at".into(), json!(rfc3339_ms(sent_at_ms)));
    object.insert("sent_at_ms".into(), json!(sent_at_ms));
    object.insert(
        "first_received_at".into(),
        json!(first_received_at_ms.map(rfc3339_ms)),
    );
    object.insert("first_received_at_ms".into(), json!(first_received_at_ms));
}

pub fn peeked_json(m: &PeekedMessage) -> Value {
    let mut o = Map::new();
    o.insert("id".into(), json!(m.id.to_string()));
    put_body(&mut o, &m.body);
    o.insert("receive_count".into(), json!(m.receive_count));
    o.insert("delivery".into(), json!(m.delivery));
    put_times(
        &mut o,
        m.sent_at_ms,
        m.first_received_delta_ms
            .map(|d| m.sent_at_ms.saturating_add(u64::from(d))),
    );
    o.insert("attributes".into(), attributes_json(&m.attributes));
    Value::Object(o)
}

pub fn received_table(messages: &[ReceivedMessage]) -> String {
    let mut t = Table::new(&[
        "ID",
        "RECEIPT",
        "RECEIVES",
        "DELIVERY",
        "SENT_AT",
        "ATTRIBUTES",
        "BODY",
    ]);
    for m in messages {
        t.row(vec![
            m.id.to_string(),
            m.receipt.to_hex(),
            m.receive_count.to_string(),
            m.delivery().to_string(),
            rfc3339_ms(m.sent_at_ms),
            attributes_cell(&m.attributes),
            body_cell(&m.body),
        ]);
    }
    t.render()
}

/// The peeked messages; on a dead-letter queue (`sources` not empty) with a
/// SOURCE column: the queue that names it, or those that do, comma-separated.
pub fn peeked_table(messages: &[PeekedMessage], sources: &[String]) -> String {
    let mut header = vec![
        "ID",
        "RECEIVES",
        "DELIVERY",
        "SENT_AT",
        "ATTRIBUTES",
        "BODY",
    ];
    if !sources.is_empty() {
        header.insert(1, "SOURCE");
    }
    let mut t = Table::new(&header);
    for m in messages {
        let mut row = vec![
            m.id.to_string(),
            m.receive_count.to_string(),
            m.delivery.to_string(),
            rfc3339_ms(m.sent_at_ms),
            attributes_cell(&m.attributes),
            body_cell(&m.body),
        ];
        if !sources.is_empty() {
            row.insert(1, sources.join(","));
        }
        t.row(row);
    }
    t.render()
}

/// Queues with their depths (visible, in flight, delayed) and the age of
/// their oldest message, like `rabbitmqctl list_queues`.
pub fn queue_list_table(infos: &[QueueInfo]) -> String {
    let mut t = Table::new(&["NAME", "VISIBLE", "IN_FLIGHT", "DELAYED", "OLDEST_AGE"]);
    for i in infos {
        let s = &i.stats;
        let held = s.visible + s.in_flight + s.delayed;
        t.row(vec![
            i.queue.as_str().to_owned(),
            s.visible.to_string(),
            s.in_flight.to_string(),
            s.delayed.to_string(),
            if held == 0 {
                "-".to_owned()
            } else {
                age(s.oldest_age())
            },
        ]);
    }
    t.render()
}

/// An age for people: milliseconds below a second, else whole seconds in
/// the grammar (`250ms`, `42s`, `2m5s`, `1d3h`).
fn age(d: std::time::Duration) -> String {
    if d.as_secs() == 0 {
        format_ms(ms(d))
    } else {
        sluice_protocol::units::format_duration(std::time::Duration::from_secs(d.as_secs()))
    }
}

pub fn queue_list_json(infos: &[QueueInfo]) -> Value {
    Value::Array(
        infos
            .iter()
            .map(|i| {
                json!({
                    "name": i.queue.as_str(),
                    "visible": i.stats.visible,
                    "in_flight": i.stats.in_flight,
                    "delayed": i.stats.delayed,
                    "oldest_age_ms": ms(i.stats.oldest_age()),
                })
            })
            .collect(),
    )
}

/// Whole milliseconds, as the JSON fields and `format_ms` show times.
fn ms(d: impl Into<std::time::Duration>) -> u64 {
    u64::try_from(d.into().as_millis()).unwrap_or(u64::MAX)
}

pub fn attributes_json_of(a: &QueueAttributes) -> Value {
    json!({
        "visibility_timeout_ms": ms(a.visibility_timeout),
        "delay_ms": ms(a.delay),
        "retention_ms": ms(a.retention),
        "max_message_bytes": a.message_bytes_max,
        "receive_wait_ms": ms(a.receive_wait),
        "redrive": a.redrive.as_ref().map(|r| json!({
            "dead_letter_queue": r.dead_letter_queue,
            "max_receives": r.max_receives,
        })),
        "max_depth": a.max_depth,
        "dedup_window_ms": ms(a.dedup_window),
        "backoff": a.backoff.map(|b| json!({"base_ms": ms(b.base), "max_ms": ms(b.max)})),
        "tags": labels_json(&a.tags),
        "annotations": labels_json(&a.annotations),
        "fifo": a.kind == sluice_client::QueueKind::Fifo,
        "content_based_dedup": a.content_based_dedup,
    })
}

fn labels_json(labels: &sluice_client::Labels) -> Value {
    Value::Object(
        labels
            .iter()
            .map(|(k, v)| (k.to_owned(), json!(v)))
            .collect(),
    )
}

fn stats_fields(s: &QueueStats) -> [(&'static str, u64); 14] {
    [
        ("visible", s.visible),
        ("delayed", s.delayed),
        ("in_flight", s.in_flight),
        ("sent", s.sent),
        ("moved_in", s.moved_in),
        ("received", s.received),
        ("deleted", s.deleted),
        ("redelivered", s.redelivered),
        ("released", s.released),
        ("dead_lettered", s.dead_lettered),
        ("redriven", s.redriven),
        ("dropped", s.dropped),
        ("purged", s.purged),
        ("oldest_age_ms", ms(s.oldest_age())),
    ]
}

pub fn queue_json(info: &QueueInfo) -> Value {
    let stats: Map<String, Value> = stats_fields(&info.stats)
        .into_iter()
        .map(|(k, v)| (k.to_owned(), json!(v)))
        .collect();
    json!({
        "name": info.queue.as_str(),
        "attributes": attributes_json_of(&info.attributes),
        "stats": stats,
    })
}

pub fn queue_table(info: &QueueInfo) -> String {
    let a = &info.attributes;
    let mut t = Table::new(&["ATTRIBUTE", "VALUE"]);
    let mut put = |k: &str, v: String| t.row(vec![k.to_owned(), v]);
    put("name", info.queue.as_str().to_owned());
    put(
        "kind",
        match a.kind {
            sluice_client::QueueKind::Fifo if a.content_based_dedup => {
                "fifo, deduplicated by content".to_owned()
            }
            sluice_client::QueueKind::Fifo => "fifo".to_owned(),
            sluice_client::QueueKind::Standard => "standard".to_owned(),
        },
    );
    put("visibility_timeout", format_ms(ms(a.visibility_timeout)));
    put("delay", format_ms(ms(a.delay)));
    put("retention", format_ms(ms(a.retention)));
    put(
        "max_message_size",
        format_bytes(u64::from(a.message_bytes_max)),
    );
    put("receive_wait", format_ms(ms(a.receive_wait)));
    put(
        "dead_letter",
        a.redrive.as_ref().map_or_else(
            || "none".to_owned(),
            |r| format!("{} after {} receives", r.dead_letter_queue, r.max_receives),
        ),
    );
    put(
        "max_depth",
        a.max_depth
            .map_or_else(|| "unbounded".to_owned(), |d| d.to_string()),
    );
    put("dedup_window", format_ms(ms(a.dedup_window)));
    put(
        "backoff",
        a.backoff.map_or_else(
            || "off".to_owned(),
            |b| format!("{}:{}", format_ms(ms(b.base)), format_ms(ms(b.max))),
        ),
    );
    for (k, v) in a.tags.iter() {
        put(&format!("tag {k}"), v.to_owned());
    }
    for (k, v) in a.annotations.iter() {
        put(&format!("annotation {k}"), v.to_owned());
    }
    let mut s = Table::new(&["STAT", "VALUE"]);
    for (k, v) in stats_fields(&info.stats) {
        // A duration in the grammar, its key without the unit.
        match k.strip_suffix("_ms") {
            Some(k) => s.row(vec![k.to_owned(), format_ms(v)]),
            None => s.row(vec![k.to_owned(), v.to_string()]),
        }
    }
    format!("{}\n{}", t.render(), s.render())
}

pub fn server_stats_json(s: &ServerStatsReply) -> Value {
    let counters: Map<String, Value> = s
        .counters
        .iter()
        .map(|c| (c.name.clone(), json!(c.value)))
        .collect();
    json!({
        "server_version": s.server_version,
        "io_backend": s.io_backend,
        "shards": s.shards,
        "counters": counters,
    })
}

pub fn server_stats_table(s: &ServerStatsReply) -> String {
    let mut t = Table::new(&["STAT", "VALUE"]);
    t.row(vec!["server_version".into(), s.server_version.clone()]);
    t.row(vec!["io_backend".into(), s.io_backend.clone()]);
    t.row(vec!["shards".into(), s.shards.to_string()]);
    for c in &s.counters {
        t.row(vec![c.name.clone(), c.value.to_string()]);
    }
    t.render()
}

/// The standard-error line of a failed entry: the error's name, what
/// failed, and why (`StaleReceipt: 0123...: the receipt is from an older
/// delivery`).
pub fn entry_error_line(err: &Error, what: &str) -> String {
    let shown = err.to_string();
    let why = shown
        .strip_prefix(err.name())
        .and_then(|s| s.strip_prefix(": "))
        .unwrap_or(&shown);
    format!("{}: {what}: {why}", err.name())
}

#[cfg(test)]
mod tests {
    use bytes::Bytes;
    use sluice_client::{MessageId, QueueName, Receipt};

    use super::*;

    fn message(body: &'static [u8]) -> ReceivedMessage {
        ReceivedMessage {
            id: MessageId(0x0193_5f3a_6b2c_7d10_8e4f_a1b2_c3d4_e5f6),
            receipt: Receipt {
                incarnation: 1,
                shard: 1,
                slot: 42,
                generation: 3,
                delivery: 7,
                check: 0x9abc_def0,
            },
            receive_count: 2,
            sent_at_ms: 1_735_689_600_000,
            first_received_delta_ms: 250,
            attributes: MessageAttributes::from_pairs([("type", "order")]).unwrap(),
            body: Bytes::from_static(body),
            group: None,
        }
    }

    #[test]
    fn tables_align_their_columns() {
        let mut t = Table::new(&["ID", "NAME", "N"]);
        t.row(vec!["1".into(), "orders".into(), "3".into()]);
        t.row(vec!["1234".into(), "q".into(), "".into()]);
        assert_eq!(t.render(), "ID    NAME    N\n1     orders  3\n1234  q\n");
    }

    #[test]
    fn received_messages_in_json() {
        let v = received_json(&message(b"world"));
        assert_eq!(v["id"], "01935f3a6b2c7d108e4fa1b2c3d4e5f6");
        assert_eq!(v["receipt"].as_str().unwrap().len(), 52);
        assert_eq!(
            v["receipt"],
            "0100000001002a000000030000000700000000000000f0debc9a"
        );
        assert_eq!(v["body"], "world");
        assert!(v.get("body_base64").is_none());
        assert_eq!(v["receive_count"], 2);
        assert_eq!(v["delivery"], 7);
        assert_eq!(v["sent_at"], "2025-01-01T00:00:00.000Z");
        assert_eq!(v["sent_at_ms"], 1_735_689_600_000u64);
        assert_eq!(v["first_received_at"], "2025-01-01T00:00:00.250Z");
        assert_eq!(v["first_received_at_ms"], 1_735_689_600_250u64);
        assert_eq!(v["attributes"], json!({"type": "order"}));
        let binary = received_json(&message(&[0xff, 0x00]));
        assert!(binary.get("body").is_none());
        assert_eq!(binary["body_base64"], "/wA=");
    }

    #[test]
    fn peeked_messages_never_received_have_no_first_receive() {
        let m = PeekedMessage {
            id: MessageId(1),
            receive_count: 0,
            delivery: 0,
            sent_at_ms: 10,
            first_received_delta_ms: None,
            attributes: MessageAttributes::new(),
            body: Bytes::from_static(b"x"),
        };
        let v = peeked_json(&m);
        assert_eq!(v["id"], "00000000000000000000000000000001");
        assert!(v.get("receipt").is_none());
        assert_eq!(v["sent_at"], "1970-01-01T00:00:00.010Z");
        assert_eq!(v["first_received_at"], Value::Null);
        assert_eq!(v["first_received_at_ms"], Value::Null);
        assert_eq!(v["attributes"], json!({}));
    }

    #[test]
    fn message_tables_escape_bodies() {
        let out = received_table(&[message(b"two\nlines")]);
        let mut lines = out.lines();
        let header = lines.next().unwrap();
        assert!(header.starts_with("ID"), "{out}");
        let row = lines.next().unwrap();
        assert!(row.ends_with("two\\nlines"), "{row}");
        assert!(row.contains("type=order"), "{row}");
        assert!(row.contains(" 2025-01-01T00:00:00.000Z "), "{row}");
        assert_eq!(body_cell(&[0xff]), "<1 bytes, not UTF-8>");
    }

    #[test]
    fn queue_info_in_json_has_every_stat() {
        let info = QueueInfo {
            queue: QueueName::new("orders").unwrap(),
            attributes: QueueAttributes::default(),
            stats: QueueStats {
                visible: 3,
                oldest_age_ms: 5,
                ..QueueStats::default()
            },
            times: None,
        };
        let v = queue_json(&info);
        assert_eq!(v["name"], "orders");
        assert_eq!(v["attributes"]["visibility_timeout_ms"], 30_000);
        assert_eq!(v["attributes"]["redrive"], Value::Null);
        let stats = v["stats"].as_object().unwrap();
        for key in [
            "visible",
            "delayed",
            "in_flight",
            "sent",
            "moved_in",
            "received",
            "deleted",
            "redelivered",
            "released",
            "dead_lettered",
            "redriven",
            "dropped",
            "purged",
            "oldest_age_ms",
        ] {
            assert!(stats.contains_key(key), "{key}");
        }
        assert_eq!(stats.len(), 14);
        assert_eq!(v["stats"]["visible"], 3);
        let table = queue_table(&info);
        // Every duration and size in the units grammar, its largest exact unit.
        for row in [
            "visibility_timeout  30s\n",
            "delay               0s\n",
            "retention           4d\n",
            "max_message_size    256KiB\n",
            "receive_wait        0s\n",
            "dedup_window        5m\n",
            "oldest_age     5ms\n",
        ] {
            assert!(table.contains(row), "{row:?} in\n{table}");
        }
        assert!(!table.contains("bytes"), "{table}");
    }

    #[test]
    fn queue_lists_show_depths_and_the_oldest_age() {
        let info = |name: &str, visible, in_flight, delayed, age_ms| QueueInfo {
            queue: QueueName::new(name).unwrap(),
            attributes: QueueAttributes::default(),
            stats: QueueStats {
                visible,
                in_flight,
                delayed,
                oldest_age_ms: age_ms,
                ..QueueStats::default()
            },
            times: None,
        };
        let infos = [
            info("a", 3, 1, 2, 125_400),
            info("b", 0, 0, 0, 0),
            info("c", 1, 0, 0, 250),
        ];
        assert_eq!(
            queue_list_table(&infos),
            "NAME  VISIBLE  IN_FLIGHT  DELAYED  OLDEST_AGE\n\
             a     3        1          2        2m5s\n\
             b     0        0          0        -\n\
             c     1        0          0        250ms\n"
        );
        let v = queue_list_json(&infos);
        assert_eq!(
            v[0],
            json!({"name": "a", "visible": 3, "in_flight": 1, "delayed": 2, "oldest_age_ms": 125_400})
        );
    }

    #[test]
    fn error_lines_start_with_the_name() {
        let e = Error::StaleReceipt(String::new());
        assert_eq!(
            entry_error_line(&e, "abc"),
            "StaleReceipt: abc: the receipt is from an older delivery"
        );
        let e = Error::QueueNotFound("queue not found: q".into());
        assert_eq!(
            entry_error_line(&e, "q"),
            "QueueNotFound: q: queue not found: q"
        );
    }
}
