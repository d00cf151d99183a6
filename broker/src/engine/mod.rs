//! The engine: queues, leases, slots, rings and the timing wheel. No sockets,
//! no clock reads: time and randomness are parameters.

pub mod doorbell;
pub mod ring;
pub mod wheel;
