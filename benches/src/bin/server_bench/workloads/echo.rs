//! The reference of the `rtt` figures: a blocking std::net echo server
//! (TCP_NODELAY) on a thread pinned to the server's CPU.

use std::io::{self, Read, Write};
use std::net::{SocketAddr, TcpListener, TcpStream};
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};
use std::thread::{self, JoinHandle};

use sluice_broker::io::pin_current_thread;

use crate::{Res, err};

/// A blocking std::net echo server on a thread pinned to `cpu`.
pub(crate) struct Echo {
    pub(crate) addr: SocketAddr,
    pub(crate) stop: Arc<AtomicBool>,
    pub(crate) thread: Option<JoinHandle<()>>,
}

impl Echo {
    pub(crate) fn start(cpu: usize) -> Res<Echo> {
        let listener = TcpListener::bind("127.0.0.1:0").map_err(err("echo bind"))?;
        let addr = listener.local_addr().map_err(err("echo addr"))?;
        let stop = Arc::new(AtomicBool::new(false));
        let flag = Arc::clone(&stop);
        let thread = thread::spawn(move || {
            if let Err(e) = pin_current_thread(cpu) {
                eprintln!("server_bench: cannot pin the echo server to CPU {cpu}: {e}");
            }
            let mut buf = vec![0u8; 64 << 10];
            for stream in listener.incoming() {
                if flag.load(Ordering::Acquire) {
                    break;
                }
                let Ok(mut stream) = stream else { continue };
                if stream.set_nodelay(true).is_err() {
                    continue;
                }
                loop {
                    match stream.read(&mut buf) {
                        Ok(0) => break,
                        Ok(n) => {
                            if stream.write_all(&buf[..n]).is_err() {
                                break;
                            }
                        }
                        Err(e) if e.kind() == io::ErrorKind::Interrupted => {}
                        Err(_) => break,
                    }
                }
            }
        });
        Ok(Echo {
            addr,
            stop,
            thread: Some(thread),
        })
    }
}

impl Drop for Echo {
    fn drop(&mut self) {
        self.stop.store(true, Ordering::Release);
        // Unblock accept.
        drop(TcpStream::connect(self.addr));
        if let Some(t) = self.thread.take() {
            let _ = t.join();
        }
    }
}
