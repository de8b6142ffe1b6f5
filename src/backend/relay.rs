//! A slow link without root: a TCP relay on a loopback port in front of
//! the server, for the worker processes a `slow_link` fault strikes. Each
//! connection the relay accepts gets its own connection to the server, and
//! the bytes of each direction are held half the link's delay before they
//! go on (in order), so a round trip takes the whole delay longer; with no
//! delay set they pass at once (through two threads, a few tens of
//! microseconds). A side that closes or fails closes both.
//!
//! `tc netem` in a network namespace would delay the packets themselves,
//! but needs root and a kernel with its module (this project's VM has
//! neither `sch_netem` nor a way to load it); the relay works on every
//! machine the lab runs on, and on a server given by URL too.

use std::io::{Read, Write};
use std::net::{Shutdown, SocketAddr, TcpListener, TcpStream, ToSocketAddrs};
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::mpsc;
use std::time::{Duration, Instant};

use anyhow::{Context, Result, anyhow};

/// A relay in front of one server, for one worker process's connections.
pub struct Relay {
    /// The server's URL with the relay's address in its place.
    url: String,
    /// Each way's hold, microseconds (half the round trip's delay).
    one_way_us: Arc<AtomicU64>,
    closed: Arc<AtomicBool>,
    port: u16,
}

impl Relay {
    /// A relay for the server at `url` (`redis://…`, `postgres://…`), on a
    /// free loopback port, passing bytes at once until told a delay.
    pub fn start(url: &str) -> Result<Relay> {
        let mut parsed = url::Url::parse(url).with_context(|| format!("cannot parse {url}"))?;
        let host = parsed
            .host_str()
            .ok_or_else(|| anyhow!("{url} names no host"))?
            .to_string();
        let port = parsed
            .port_or_known_default()
            .or_else(|| default_port(parsed.scheme()))
            .ok_or_else(|| anyhow!("{url} names no port"))?;
        let server: SocketAddr = (host.as_str(), port)
            .to_socket_addrs()
            .with_context(|| format!("cannot resolve {host}:{port}"))?
            .next()
            .ok_or_else(|| anyhow!("{host}:{port} resolves to no address"))?;
        let listener = TcpListener::bind("127.0.0.1:0").context("cannot open the relay's port")?;
        let local = listener.local_addr()?;
        parsed
            .set_host(Some("127.0.0.1"))
            .and_then(|()| {
                parsed
                    .set_port(Some(local.port()))
                    .map_err(|()| url::ParseError::InvalidPort)
            })
            .with_context(|| format!("cannot point {url} at the relay"))?;
        let relay = Relay {
            url: parsed.to_string(),
            one_way_us: Arc::new(AtomicU64::new(0)),
            closed: Arc::new(AtomicBool::new(false)),
            port: local.port(),
        };
        let (one_way, closed) = (relay.one_way_us.clone(), relay.closed.clone());
        std::thread::Builder::new()
            .name("relay".into())
            .spawn(move || accept(listener, server, one_way, closed))
            .context("cannot start the relay")?;
        Ok(relay)
    }

    /// The URL a worker process connects to.
    pub fn url(&self) -> &str {
        &self.url
    }

    /// From now, each round trip takes `delay` longer (0: none).
    pub fn set_delay(&self, delay: Duration) {
        self.one_way_us
            .store((delay.as_micros() / 2) as u64, Ordering::Relaxed);
    }
}

impl Drop for Relay {
    fn drop(&mut self) {
        self.closed.store(true, Ordering::Relaxed);
        // Wake the accept loop so that it sees it is closed.
        let _ = TcpStream::connect(("127.0.0.1", self.port));
    }
}

fn default_port(scheme: &str) -> Option<u16> {
    match scheme {
        "redis" => Some(6379),
        "postgres" | "postgresql" => Some(5432),
        _ => None,
    }
}

fn accept(
    listener: TcpListener,
    server: SocketAddr,
    one_way: Arc<AtomicU64>,
    closed: Arc<AtomicBool>,
) {
    for client in listener.incoming() {
        if closed.load(Ordering::Relaxed) {
            return;
        }
        let Ok(client) = client else { continue };
        // A server that does not answer (down, restarting): the client's
        // connection closes at once, as the server's own would fail.
        let Ok(upstream) = TcpStream::connect(server) else {
            let _ = client.shutdown(Shutdown::Both);
            continue;
        };
        let _ = (client.set_nodelay(true), upstream.set_nodelay(true));
        let (Ok(c2), Ok(u2)) = (client.try_clone(), upstream.try_clone()) else {
            continue;
        };
        pipe(client, upstream, one_way.clone());
        pipe(u2, c2, one_way.clone());
    }
}

/// Bytes from `from` to `to`, each chunk held the one-way delay set when
/// it was read; when either side ends, both close.
fn pipe(mut from: TcpStream, mut to: TcpStream, one_way: Arc<AtomicU64>) {
    let (tx, rx) = mpsc::channel::<(Instant, Vec<u8>)>();
    let (Ok(from2), Ok(to2)) = (from.try_clone(), to.try_clone()) else {
        return;
    };
    std::thread::spawn(move || {
        let mut buf = vec![0u8; 64 * 1024];
        loop {
            let n = match from.read(&mut buf) {
                Ok(0) | Err(_) => break,
                Ok(n) => n,
            };
            let due = Instant::now() + Duration::from_micros(one_way.load(Ordering::Relaxed));
            if tx.send((due, buf[..n].to_vec())).is_err() {
                break;
            }
        }
        // The writer sends what was read, then closes both.
    });
    std::thread::spawn(move || {
        for (due, bytes) in rx {
            let now = Instant::now();
            if due > now {
                std::thread::sleep(due - now);
            }
            if to.write_all(&bytes).is_err() {
                break;
            }
        }
        let _ = to2.shutdown(Shutdown::Both);
        let _ = from2.shutdown(Shutdown::Both);
    });
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A server that echoes each line back.
    fn echo() -> u16 {
        let l = TcpListener::bind("127.0.0.1:0").unwrap();
        let port = l.local_addr().unwrap().port();
        std::thread::spawn(move || {
            for s in l.incoming().flatten() {
                std::thread::spawn(move || {
                    let mut w = s.try_clone().unwrap();
                    let _ = std::io::copy(&mut &s, &mut w);
                });
            }
        });
        port
    }

    fn round_trip(s: &mut TcpStream) -> Duration {
        let t = Instant::now();
        s.write_all(b"ping\n").unwrap();
        let mut buf = [0u8; 5];
        s.read_exact(&mut buf).unwrap();
        assert_eq!(&buf, b"ping\n");
        t.elapsed()
    }

    #[test]
    fn a_round_trip_takes_the_delay_longer_while_it_is_set() {
        let port = echo();
        let relay = Relay::start(&format!("redis://127.0.0.1:{port}/")).unwrap();
        assert!(
            relay.url().starts_with("redis://127.0.0.1:"),
            "{}",
            relay.url()
        );
        assert_ne!(relay.url(), format!("redis://127.0.0.1:{port}/"));
        let addr = url::Url::parse(relay.url()).unwrap().port().unwrap();
        let mut s = TcpStream::connect(("127.0.0.1", addr)).unwrap();
        // Ordering only (a loaded machine may be slow on its own): with a
        // 40 ms delay a round trip takes at least 40 ms.
        round_trip(&mut s);
        relay.set_delay(Duration::from_millis(40));
        assert!(round_trip(&mut s) >= Duration::from_millis(40));
        // A postgres URL keeps its user and database.
        let pg = Relay::start(&format!("postgres://me@127.0.0.1:{port}/db")).unwrap();
        assert!(
            pg.url().starts_with("postgres://me@127.0.0.1:"),
            "{}",
            pg.url()
        );
        assert!(pg.url().ends_with("/db"), "{}", pg.url());
    }

    #[test]
    fn a_server_that_closes_closes_the_client() {
        // A server that accepts and closes at once.
        let l = TcpListener::bind("127.0.0.1:0").unwrap();
        let port = l.local_addr().unwrap().port();
        std::thread::spawn(move || {
            for s in l.incoming().flatten() {
                drop(s);
            }
        });
        let relay = Relay::start(&format!("redis://127.0.0.1:{port}")).unwrap();
        let addr = url::Url::parse(relay.url()).unwrap().port().unwrap();
        let mut s = TcpStream::connect(("127.0.0.1", addr)).unwrap();
        s.set_read_timeout(Some(Duration::from_secs(5))).unwrap();
        let mut buf = [0u8; 1];
        assert_eq!(s.read(&mut buf).unwrap_or(0), 0, "closed, not hung");
    }
}
