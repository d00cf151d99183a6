//! The queue a connection's message actions last named, remembered by its
//! URL. A client sends to, receives from and deletes in one queue request
//! after request, and reading a queue URL into the engine's queue name
//! (the URL taken apart, the name checked twice over, the engine's name
//! made) costs more than the rest of a small request's own work. The
//! engine's queue is a function of the URL, the request's region and the
//! door (its own account and region), so remembering it changes no
//! answer: only a URL that named a queue is remembered, and only for the
//! same region on the same door.

use sluice_protocol::QueueName;

/// Bytes of a URL remembered at most (a valid one is far shorter).
const URL_BYTES_MAX: usize = 512;

/// The last queue a connection's message actions named (see the module
/// docs). The server keeps one per connection and hands it to
/// [`crate::Door::call_remembering`].
#[derive(Debug, Default)]
pub struct QueueMemo {
    last: Option<Remembered>,
}

#[derive(Debug)]
struct Remembered {
    /// The door that read it (its address: one door's memo says nothing
    /// of another's names).
    door: usize,
    url: String,
    region: String,
    /// Whether the queue is a FIFO queue, by its name.
    fifo: bool,
    queue: QueueName,
}

impl QueueMemo {
    /// The queue `url` names for a request in `region` on door `door`
    /// (and whether it is FIFO), when it is the one remembered.
    pub(crate) fn get(&self, door: usize, url: &str, region: &str) -> Option<(bool, QueueName)> {
        let r = self.last.as_ref()?;
        (r.door == door && r.url == url && r.region == region).then(|| (r.fifo, r.queue.clone()))
    }

    /// Remembers that `url` names `queue` for a request in `region` on
    /// door `door`, in place of the queue remembered before.
    pub(crate) fn put(
        &mut self,
        door: usize,
        url: &str,
        region: &str,
        fifo: bool,
        queue: &QueueName,
    ) {
        if url.len() > URL_BYTES_MAX {
            return;
        }
        match &mut self.last {
            Some(r) => {
                r.door = door;
                r.url.clear();
                r.url.push_str(url);
                r.region.clear();
                r.region.push_str(region);
                r.fifo = fifo;
                r.queue = queue.clone();
            }
            None => {
                self.last = Some(Remembered {
                    door,
                    url: url.to_owned(),
                    region: region.to_owned(),
                    fifo,
                    queue: queue.clone(),
                });
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_queue_is_found_by_its_url_region_and_door_only() {
        let q = QueueName::new("orders").unwrap();
        let mut m = QueueMemo::default();
        assert_eq!(m.get(1, "http://h/0/orders", "us-east-1"), None);
        m.put(1, "http://h/0/orders", "us-east-1", false, &q);
        assert_eq!(
            m.get(1, "http://h/0/orders", "us-east-1"),
            Some((false, q.clone()))
        );
        assert_eq!(
            m.get(2, "http://h/0/orders", "us-east-1"),
            None,
            "another door"
        );
        assert_eq!(
            m.get(1, "http://h/0/orders", "eu-west-1"),
            None,
            "another region"
        );
        assert_eq!(
            m.get(1, "http://h/0/order", "us-east-1"),
            None,
            "another URL"
        );
        let f = QueueName::new("jobs.fifo").unwrap();
        m.put(1, "http://h/0/jobs.fifo", "us-east-1", true, &f);
        assert_eq!(m.get(1, "http://h/0/orders", "us-east-1"), None, "replaced");
        assert_eq!(
            m.get(1, "http://h/0/jobs.fifo", "us-east-1"),
            Some((true, f))
        );
        let long = format!("http://h/0/{}", "x".repeat(URL_BYTES_MAX));
        m.put(1, &long, "us-east-1", false, &q);
        assert_eq!(m.get(1, &long, "us-east-1"), None, "too long to keep");
    }
}
