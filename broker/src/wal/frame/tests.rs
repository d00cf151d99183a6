use super::*;

/// A log of `n` frames with payloads of different lengths (the first
/// empty), numbered from `first`, and where each frame starts.
fn log(n: usize, first: u64) -> (Vec<u8>, Vec<usize>) {
    let mut out = Vec::new();
    let mut starts = Vec::new();
    for i in 0..n {
        starts.push(out.len());
        let payload: Vec<u8> = (0..i * 7).map(|b| (b * 31 + i) as u8).collect();
        encode_frame(first + i as u64, &payload, &mut out);
    }
    (out, starts)
}

#[test]
fn frames_read_back_as_written() {
    let (bytes, starts) = log(6, 40);
    let scan = scan(&bytes, 1_000, 40).unwrap();
    assert_eq!(scan.end, End::Clean);
    assert_eq!(scan.frames.len(), 6);
    for (i, f) in scan.frames.iter().enumerate() {
        assert_eq!(f.offset, 1_000 + starts[i] as u64);
        assert_eq!(f.seq, 40 + i as u64);
        assert_eq!(f.payload.len(), i * 7);
    }
    assert_eq!(scan.next_seq(40), 46);
    let empty = super::scan(&[], 0, 9).unwrap();
    assert_eq!(
        (empty.frames.len(), empty.end, empty.next_seq(9)),
        (0, End::Clean, 9)
    );
}

#[test]
fn a_log_cut_anywhere_in_its_last_frame_is_torn_there() {
    let (bytes, starts) = log(4, 1);
    let last = starts[3];
    for cut in last..bytes.len() {
        let scan = scan(&bytes[..cut], 0, 1).unwrap();
        if cut == last {
            assert_eq!(scan.end, End::Clean, "cut at a frame's start");
        } else {
            assert!(
                matches!(scan.end, End::Torn { offset, .. } if offset == last as u64),
                "cut at {cut}: {:?}",
                scan.end
            );
        }
        assert_eq!(scan.frames.len(), 3, "cut at {cut}");
    }
}

#[test]
fn a_byte_changed_in_any_frame_but_the_last_is_corruption() {
    let (bytes, starts) = log(5, 7);
    for at in 0..starts[4] {
        let frame = starts.iter().rposition(|&s| s <= at).unwrap();
        for flip in [0x01u8, 0x80, 0xff] {
            let mut bad = bytes.clone();
            bad[at] ^= flip;
            let err = scan(&bad, 0, 7).unwrap_err();
            assert_eq!(err.offset, starts[frame] as u64, "byte {at} ^ {flip:#x}");
            assert!(err.next_good > err.offset);
            assert!(err.to_string().contains(&format!("byte {}", err.offset)));
        }
    }
}

#[test]
fn a_byte_changed_in_the_last_frame_is_a_torn_end() {
    let (bytes, starts) = log(3, 0);
    for at in starts[2]..bytes.len() {
        let mut bad = bytes.clone();
        bad[at] ^= 0x20;
        let scan = scan(&bad, 0, 0).unwrap();
        assert!(
            matches!(scan.end, End::Torn { offset, .. } if offset == starts[2] as u64),
            "byte {at}: {:?}",
            scan.end
        );
        assert_eq!(scan.frames.len(), 2);
    }
}

#[test]
fn zeros_or_garbage_after_the_last_frame_are_a_torn_end() {
    let (bytes, _) = log(3, 0);
    for tail in [vec![0u8; 4096], vec![0xA5; 3], b"SWLF".to_vec()] {
        let mut b = bytes.clone();
        b.extend_from_slice(&tail);
        let scan = scan(&b, 0, 0).unwrap();
        assert_eq!(scan.frames.len(), 3);
        assert!(
            matches!(scan.end, End::Torn { offset, .. } if offset == bytes.len() as u64),
            "{:?}",
            scan.end
        );
    }
}

#[test]
fn frames_out_of_sequence_are_not_read() {
    let (bytes, starts) = log(3, 10);
    // A log that starts at another number than the one expected.
    let scan_wrong = scan(&bytes, 0, 11).unwrap_err();
    assert_eq!(scan_wrong.offset, 0);
    assert_eq!(scan_wrong.why, "out of sequence");
    // A frame written twice: the second copy is out of sequence, and
    // nothing good follows it.
    let mut twice = bytes.clone();
    twice.extend_from_slice(&bytes[starts[2]..]);
    let scan = scan(&twice, 0, 10).unwrap();
    assert_eq!(scan.frames.len(), 3);
    assert_eq!(
        scan.end,
        End::Torn {
            offset: bytes.len() as u64,
            why: "out of sequence"
        }
    );
}

#[test]
fn a_length_past_the_limit_is_refused_without_reading_it() {
    let mut b = Vec::new();
    b.extend_from_slice(&FRAME_MAGIC);
    b.extend_from_slice(&u32::MAX.to_le_bytes());
    b.extend_from_slice(&0u64.to_le_bytes());
    b.extend_from_slice(&0u32.to_le_bytes());
    let scan = scan(&b, 0, 0).unwrap();
    assert_eq!(
        scan.end,
        End::Torn {
            offset: 0,
            why: "a payload length past the limit"
        }
    );
}

#[test]
fn any_bytes_scan_without_panicking() {
    // Frames, then bytes changed by a simple generator: every outcome is
    // a scan or an error, whatever the bytes.
    let (good, _) = log(8, 0);
    let mut x = 0x9E37_79B9_7F4A_7C15u64;
    for round in 0..2_000 {
        let mut b = good.clone();
        for _ in 0..1 + round % 5 {
            x ^= x << 13;
            x ^= x >> 7;
            x ^= x << 17;
            let at = (x % b.len() as u64) as usize;
            b[at] = (x >> 32) as u8;
        }
        let cut = (x >> 40) as usize % (b.len() + 1);
        match scan(&b[..cut], 0, 0) {
            Ok(s) => assert!(s.frames.iter().all(|f| f.offset < cut as u64)),
            Err(e) => assert!(e.next_good > e.offset && e.next_good < cut as u64),
        }
    }
}

#[test]
fn a_head_over_parts_is_the_head_of_their_concatenation() {
    for parts in [
        &[&b""[..]][..],
        &[&b"commit-head-16by"[..], b"records"],
        &[b"a", b"", b"bc", b"defghij"],
    ] {
        let whole: Vec<u8> = parts.concat();
        let mut framed = Vec::new();
        encode_frame(42, &whole, &mut framed);
        let head = frame_head(42, parts);
        assert_eq!(&framed[..FRAME_HEAD_BYTES], &head[..]);
        assert_eq!(&framed[FRAME_HEAD_BYTES..], &whole[..]);
    }
}
