//! Values for the protocol's request fields: a [`Duration`] as whole
//! milliseconds, a count in the field's width. A leaf, so the operations
//! and the messages both use it without importing each other.

use std::time::Duration;

use sluice_protocol::Millis;

use crate::error::{Error, Result};

/// Milliseconds of `d` for a protocol field, rounded up (so a tiny
/// non-zero time never becomes 0, which would release a message).
///
/// # Errors
/// `InvalidArgument` naming `what` when it does not fit below the field's
/// "queue default" marker (`u32::MAX`).
pub(crate) fn wire_ms(d: Duration, what: &str) -> Result<u32> {
    Millis::try_from(d)
        .ok()
        .map(Millis::get)
        .filter(|&ms| ms < u32::MAX)
        .ok_or_else(|| {
            Error::InvalidArgument(format!(
                "{what}: {d:?} does not fit the protocol's millisecond field (at most {} ms)",
                u32::MAX - 1
            ))
        })
}

/// A count for a protocol field of type `T`.
///
/// # Errors
/// `InvalidArgument` naming `what` when it does not fit.
pub(crate) fn wire_count<T: TryFrom<usize>>(n: usize, what: &str) -> Result<T> {
    T::try_from(n).map_err(|_| {
        Error::InvalidArgument(format!("{what}: {n} does not fit the protocol's field"))
    })
}
