//! [`SendEntry`]: one message to send. It is the protocol's own type,
//! declared once and re-exported here, with its builders (`delay` takes a
//! [`Duration`](std::time::Duration)).

pub use sluice_protocol::SendEntry;
