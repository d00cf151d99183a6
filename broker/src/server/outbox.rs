//! What an HTTP connection's session (the SQS door's, the metrics
//! endpoint's) hands the io layer: the response bytes written and not yet
//! handed over, the [`Command`]s issued since the shard loop last took
//! them, and whether the connection is closing.

use bytes::BytesMut;

use super::limits::CLOSE_FLUSH_TIMEOUT_NS;
use super::session::{Command, Phase};

/// See the module docs.
#[derive(Debug, Default)]
pub struct Outbox {
    /// Responses written and not yet handed over in a [`Command::Send`].
    out: BytesMut,
    commands: Vec<Command>,
    /// Bytes of the `Send`s among `commands`.
    commanded_bytes: usize,
    closing: bool,
    closing_since_ns: u64,
}

impl Outbox {
    /// Where responses are written.
    pub fn buf(&mut self) -> &mut BytesMut {
        &mut self.out
    }

    /// Whether responses wait for [`Outbox::flush`].
    #[must_use]
    pub fn has_output(&self) -> bool {
        !self.out.is_empty()
    }

    /// Bytes written or commanded and not yet taken by the shard loop.
    #[must_use]
    pub fn pending_bytes(&self) -> usize {
        self.commanded_bytes + self.out.len()
    }

    /// Issues `command`.
    pub fn push(&mut self, command: Command) {
        self.commands.push(command);
    }

    /// The commands issued since the last call, in order.
    pub fn commands(&mut self) -> std::vec::Drain<'_, Command> {
        self.commanded_bytes = 0;
        self.commands.drain(..)
    }

    /// Hands the responses written so far to the io layer.
    pub fn flush(&mut self) {
        if !self.out.is_empty() {
            let bytes = self.out.split().freeze();
            self.commanded_bytes += bytes.len();
            self.commands.push(Command::Send(bytes));
        }
    }

    /// Whether the connection is closing.
    #[must_use]
    pub fn is_closing(&self) -> bool {
        self.closing
    }

    /// Ready, or closing.
    #[must_use]
    pub fn phase(&self) -> Phase {
        if self.closing {
            Phase::Closing
        } else {
            Phase::Ready
        }
    }

    /// Closes once what is written is sent (once; later calls do nothing).
    pub fn close(&mut self, now_ns: u64) {
        if self.closing {
            return;
        }
        self.closing = true;
        self.closing_since_ns = now_ns;
        self.flush();
        self.commands.push(Command::Close);
    }

    /// The io layer reports the connection gone.
    pub fn closed(&mut self) {
        self.closing = true;
    }

    /// For a closing connection whose peer does not read: at
    /// [`CLOSE_FLUSH_TIMEOUT_NS`] after the close began, closes at once.
    /// True when the connection is closing (nothing else is due).
    pub fn tick_closing(&mut self, now_ns: u64) -> bool {
        if !self.closing {
            return false;
        }
        if now_ns.saturating_sub(self.closing_since_ns) >= CLOSE_FLUSH_TIMEOUT_NS {
            self.commands.push(Command::CloseNow);
        }
        true
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn sends_keep_their_order_and_close_flushes_first() {
        let mut o = Outbox::default();
        o.buf().extend_from_slice(b"ab");
        o.flush();
        o.buf().extend_from_slice(b"cd");
        o.flush();
        o.buf().extend_from_slice(b"ef");
        assert_eq!(o.pending_bytes(), 6);
        o.close(5);
        o.close(6);
        let got: Vec<Command> = o.commands().collect();
        assert!(matches!(
            &got[..],
            [Command::Send(a), Command::Send(b), Command::Send(c), Command::Close]
                if &a[..] == b"ab" && &b[..] == b"cd" && &c[..] == b"ef"
        ));
        assert_eq!((o.pending_bytes(), o.phase()), (0, Phase::Closing));
        assert!(o.tick_closing(5 + CLOSE_FLUSH_TIMEOUT_NS - 1));
        assert_eq!(o.commands().count(), 0);
        assert!(o.tick_closing(5 + CLOSE_FLUSH_TIMEOUT_NS));
        assert!(matches!(o.commands().next(), Some(Command::CloseNow)));
        assert!(!Outbox::default().tick_closing(u64::MAX));
    }
}
