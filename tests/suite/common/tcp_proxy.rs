//! A loopback TCP proxy between a client and a server that can pass bytes through, delay them,
//! or drop every connection, switched at run time.
#![allow(dead_code)]

use std::io::{Read, Write};
use std::net::{TcpListener, TcpStream};
use std::sync::Arc;
use std::sync::atomic::{AtomicU8, Ordering};
use std::time::Duration;

#[derive(Clone, Copy, PartialEq, Eq, Debug)]
pub enum Mode {
    Pass = 0,
    /// Each chunk is held this long before it is forwarded (2 s).
    Delay = 1,
    /// Connections are closed at once, new and open ones.
    Drop = 2,
}

pub struct TcpProxy {
    pub port: u16,
    mode: Arc<AtomicU8>,
}

impl TcpProxy {
    pub fn start(upstream: u16) -> TcpProxy {
        let listener = TcpListener::bind("127.0.0.1:0").unwrap();
        let port = listener.local_addr().unwrap().port();
        let mode = Arc::new(AtomicU8::new(Mode::Pass as u8));
        let m = mode.clone();
        std::thread::spawn(move || {
            for client in listener.incoming().flatten() {
                if m.load(Ordering::Relaxed) == Mode::Drop as u8 {
                    drop(client);
                    continue;
                }
                let Ok(server) = TcpStream::connect(("127.0.0.1", upstream)) else {
                    continue;
                };
                for (from, to) in [
                    (client.try_clone().unwrap(), server.try_clone().unwrap()),
                    (server, client),
                ] {
                    let m = m.clone();
                    std::thread::spawn(move || pump(from, to, m));
                }
            }
        });
        TcpProxy { port, mode }
    }

    pub fn url(&self) -> String {
        format!("redis://127.0.0.1:{}", self.port)
    }

    pub fn set(&self, mode: Mode) {
        self.mode.store(mode as u8, Ordering::Relaxed);
    }
}

fn pump(mut from: TcpStream, mut to: TcpStream, mode: Arc<AtomicU8>) {
    let mut buf = [0u8; 16 * 1024];
    loop {
        let n = match from.read(&mut buf) {
            Ok(0) | Err(_) => break,
            Ok(n) => n,
        };
        match mode.load(Ordering::Relaxed) {
            m if m == Mode::Drop as u8 => break,
            m if m == Mode::Delay as u8 => std::thread::sleep(Duration::from_secs(2)),
            _ => {}
        }
        if to.write_all(&buf[..n]).is_err() {
            break;
        }
    }
    let _ = from.shutdown(std::net::Shutdown::Both);
    let _ = to.shutdown(std::net::Shutdown::Both);
}
