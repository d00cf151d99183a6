//! Without the `tls` feature there is no TLS session: the type that stands
//! for one has no values, so the connections' TLS paths compile to nothing.

use bytes::BytesMut;

use crate::error::Result;

/// A TLS session, which cannot exist without the `tls` feature.
#[derive(Debug)]
pub(crate) enum TlsSession {}

#[allow(clippy::unused_self, clippy::needless_pass_by_ref_mut)]
impl TlsSession {
    pub(crate) fn seal(&self, _plain: &[u8], _out: &mut Vec<u8>) -> Result<()> {
        match *self {}
    }

    pub(crate) fn open(&self, _cipher: &[u8], _plain: &mut BytesMut) -> Result<bool> {
        match *self {}
    }

    #[cfg(feature = "blocking")]
    pub(crate) fn handshake<S>(&self, _stream: &mut S) -> Result<()> {
        match *self {}
    }

    #[cfg(feature = "async")]
    pub(crate) fn is_handshaking(&self) -> bool {
        match *self {}
    }

    #[cfg(feature = "async")]
    pub(crate) fn outgoing(&self, _out: &mut Vec<u8>) {
        match *self {}
    }

    #[cfg(feature = "async")]
    pub(crate) fn handshake_input(&self, _cipher: &[u8]) -> Result<bool> {
        match *self {}
    }
}
