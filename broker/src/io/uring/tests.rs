use std::io::{Read, Write};
use std::net::TcpStream;

use super::*;
use crate::io::{DriverConfig, Event, OpenError};

/// A driver on 127.0.0.1:0, or `None` (with a skip line) where io_uring
/// is unavailable, except under `CI=true`.
fn driver() -> Option<UringDriver> {
    let config = DriverConfig::new("127.0.0.1:0".parse().unwrap());
    match UringDriver::open(&config) {
        Ok(driver) => Some(driver),
        Err(OpenError::UringUnavailable(why)) => {
            assert!(
                std::env::var("CI").map_or(true, |v| v != "true"),
                "io_uring is required under CI=true: {why}"
            );
            eprintln!("SKIP: io_uring unavailable here ({why})");
            None
        }
        Err(e) => panic!("open: {e}"),
    }
}

#[test]
fn drain_reaps_every_operation() {
    let Some(mut driver) = driver() else {
        return;
    };
    let mut client = TcpStream::connect(driver.local_addr()).unwrap();
    client
        .set_read_timeout(Some(Duration::from_secs(30)))
        .unwrap();
    client.write_all(b"ping").unwrap();
    let mut conn = None;
    for _ in 0..1000 {
        driver
            .poll(Some(Duration::from_millis(10)), &mut |ops, event| {
                if let Event::Data { conn: c, bytes } = event {
                    ops.send(c, bytes::Bytes::copy_from_slice(bytes));
                    conn = Some(c);
                }
            })
            .unwrap();
        if conn.is_some() {
            break;
        }
    }
    assert!(conn.is_some(), "no data arrived");
    let mut got = [0u8; 4];
    client.read_exact(&mut got).unwrap();
    assert_eq!(&got, b"ping");
    // Accept, wake read and the connection's receive are in flight.
    assert!(driver.inflight >= 3, "{} in flight", driver.inflight);
    assert!(driver.drain(), "drain left {} in flight", driver.inflight);
    assert_eq!(driver.inflight, 0);
}

#[test]
fn user_data_round_trips() {
    for (kind, index, generation) in [
        (Kind::Recv, 0, 0),
        (Kind::Send, 0xff_ffff, u32::MAX),
        (Kind::CancelConn, 12345, 7),
        (Kind::SelfTest, 1, 1 << 31),
    ] {
        let (k, i, g) = decode(encode(kind, index, generation));
        assert_eq!((k, i, g), (Some(kind), index, generation));
    }
    assert_eq!(decode(0).0, None);
}
