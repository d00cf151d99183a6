//! A raw protocol connection over a blocking `std::net` socket, and the
//! frames the workloads write again and again: SEND and RECEIVE frames are
//! encoded once, replies are decoded in place.

use std::io::{self, Read, Write};
use std::net::{SocketAddr, TcpStream};

use bytes::{Bytes, BytesMut};
use sluice_protocol::limits::PROTOCOL_VERSION;
use sluice_protocol::{
    AttributeUpdate, Frame, FrameDecoder, HelloRequest, QueueAttributesRequest, QueueName,
    ReceiveRequest, Reply, Request, SendEntry, SendRequest,
};

use crate::{
    QUEUE, READ_CHUNK_BYTES, READ_TIMEOUT, RECEIVE_WAIT_MS, REPLY_FRAME_BYTES_MAX, Res,
    SHARD_TRIES_MAX, err,
};

pub(crate) struct Client {
    pub(crate) stream: TcpStream,
    decoder: FrameDecoder,
    rbuf: BytesMut,
    scratch: Vec<u8>,
    pub(crate) wbuf: BytesMut,
    pub(crate) shard: u16,
}

impl Client {
    /// Connects and says HELLO.
    pub(crate) fn connect(addr: SocketAddr) -> Res<Client> {
        let stream = TcpStream::connect(addr).map_err(err("connect"))?;
        stream.set_nodelay(true).map_err(err("nodelay"))?;
        stream
            .set_read_timeout(Some(READ_TIMEOUT))
            .map_err(err("read timeout"))?;
        let mut c = Client {
            stream,
            decoder: FrameDecoder::new(REPLY_FRAME_BYTES_MAX),
            rbuf: BytesMut::with_capacity(READ_CHUNK_BYTES),
            scratch: vec![0; READ_CHUNK_BYTES],
            wbuf: BytesMut::new(),
            shard: 0,
        };
        let hello = Request::Hello(HelloRequest {
            version: PROTOCOL_VERSION,
            token: Bytes::new(),
            session_timeout_ms: 0,
        });
        match c.call(&hello)? {
            Reply::Hello(h) => c.shard = h.shard,
            other => return Err(format!("HELLO answered {other:?}")),
        }
        Ok(c)
    }

    /// A connection on shard `want`, opening (and closing) connections until
    /// HELLO names it.
    pub(crate) fn connect_to_shard(addr: SocketAddr, want: u16) -> Res<Client> {
        for _ in 0..SHARD_TRIES_MAX {
            let c = Client::connect(addr)?;
            if c.shard == want {
                return Ok(c);
            }
        }
        Err(format!(
            "no connection landed on shard {want} in {SHARD_TRIES_MAX} tries"
        ))
    }

    pub(crate) fn queue(&mut self, request: &Request) -> Res<()> {
        request
            .encode(0, &mut self.wbuf)
            .map_err(|e| format!("encode: {e}"))
    }

    pub(crate) fn flush(&mut self) -> Res<()> {
        if self.wbuf.is_empty() {
            return Ok(());
        }
        self.stream.write_all(&self.wbuf).map_err(err("write"))?;
        self.wbuf.clear();
        Ok(())
    }

    /// One `read` (blocking); what it got is appended to the frame buffer.
    pub(crate) fn fill(&mut self) -> Res<()> {
        loop {
            match self.stream.read(&mut self.scratch) {
                Ok(0) => return Err("the server closed the connection".into()),
                Ok(n) => {
                    self.rbuf.extend_from_slice(&self.scratch[..n]);
                    return Ok(());
                }
                Err(e) if e.kind() == io::ErrorKind::Interrupted => {}
                Err(e) => return Err(format!("read: {e}")),
            }
        }
    }

    /// The next whole frame already read, if any.
    pub(crate) fn frame(&mut self) -> Res<Option<Frame>> {
        self.decoder
            .decode(&mut self.rbuf)
            .map_err(|e| format!("reply framing: {e}"))
    }

    /// The next frame, reading until it is whole.
    pub(crate) fn read_frame(&mut self) -> Res<Frame> {
        loop {
            if let Some(f) = self.frame()? {
                return Ok(f);
            }
            self.fill()?;
        }
    }

    /// One request, one reply.
    pub(crate) fn call(&mut self, request: &Request) -> Res<Reply> {
        self.queue(request)?;
        self.flush()?;
        let f = self.read_frame()?;
        decode(f)
    }
}

pub(crate) fn decode(f: Frame) -> Res<Reply> {
    match Reply::decode(f.opcode, f.payload) {
        Ok(Reply::Error(e)) => Err(format!(
            "the server answered ERROR {}: {}",
            e.code, e.message
        )),
        Ok(r) => Ok(r),
        Err(e) => Err(format!("reply {:#04x}: {e}", f.opcode)),
    }
}

pub(crate) fn queue_name() -> QueueName {
    // A fixed, valid name.
    QueueName::new(QUEUE).expect("`bench` is a valid queue name")
}

pub(crate) fn create_queue(c: &mut Client) -> Res<()> {
    let req = Request::CreateQueue(QueueAttributesRequest {
        queue: queue_name(),
        attributes: AttributeUpdate::default(),
    });
    match c.call(&req)? {
        Reply::CreateQueue { .. } => Ok(()),
        other => Err(format!("CREATE_QUEUE answered {other:?}")),
    }
}

/// A whole SEND frame of `count` messages of `size` bytes.
pub(crate) fn send_frame(count: usize, size: usize) -> Res<Bytes> {
    let entries: Vec<SendEntry> = (0..count)
        .map(|i| {
            let fill = b'a' + u8::try_from(i % 26).unwrap_or(0);
            SendEntry::new(Bytes::from(vec![fill; size]))
        })
        .collect();
    let req = Request::Send(SendRequest::new(queue_name(), &entries).map_err(|e| e.to_string())?);
    let mut buf = BytesMut::new();
    req.encode(0, &mut buf).map_err(|e| e.to_string())?;
    Ok(buf.freeze())
}

pub(crate) fn receive_frame(max: usize) -> Res<Bytes> {
    let req = Request::Receive(ReceiveRequest {
        queue: queue_name(),
        max_messages: u16::try_from(max).map_err(|e| e.to_string())?,
        visibility_timeout_ms: None,
        wait_ms: Some(RECEIVE_WAIT_MS),
        bind_leases: false,
        with_source: false,
    });
    let mut buf = BytesMut::new();
    req.encode(0, &mut buf).map_err(|e| e.to_string())?;
    Ok(buf.freeze())
}
