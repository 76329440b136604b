//! `kvroute listen --metrics` against misbehaving clients, on loopback: a request line that
//! never ends is cut off after a bounded amount, a client that trickles bytes neither blocks a
//! concurrent scrape nor keeps `listen` running past `--duration`. Bounded: every read and
//! write has a deadline and `listen` exits on its own.
#![cfg(all(feature = "listen", not(loom)))]

use std::io::{BufRead, BufReader, Read, Write};
use std::net::TcpStream;
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

/// Kills the process when the test ends, however it ends.
struct Killed(Child);

impl Drop for Killed {
    fn drop(&mut self) {
        let _ = self.0.kill();
        let _ = self.0.wait();
    }
}

/// Starts `kvroute listen` with `--metrics` on a free loopback port (nobody publishes on its
/// endpoint) and returns it with the metrics address it announces.
fn listen(duration: &str) -> (Killed, String) {
    let child = Command::new(env!("CARGO_BIN_EXE_kvroute"))
        .args(["listen", "--zmq", "4=tcp://127.0.0.1:9", "--interval", "1"])
        .args(["--duration", duration, "--metrics", "127.0.0.1:0"])
        .stdout(Stdio::null())
        .stderr(Stdio::piped())
        .spawn()
        .expect("the binary runs");
    let mut child = Killed(child);
    let mut notes = BufReader::new(child.0.stderr.take().unwrap());
    let mut line = String::new();
    notes.read_line(&mut line).expect("listen says where its metrics are");
    let address = line
        .trim_end()
        .strip_prefix("metrics at http://")
        .and_then(|rest| rest.strip_suffix("/metrics"))
        .unwrap_or_else(|| panic!("listen said {line:?}"))
        .to_string();
    (child, address)
}

/// A scrape of `/metrics` with a deadline on every read and write: the whole response.
fn scrape(address: &str, deadline: Duration) -> std::io::Result<String> {
    let mut stream = TcpStream::connect(address)?;
    stream.set_read_timeout(Some(deadline))?;
    stream.set_write_timeout(Some(deadline))?;
    write!(stream, "GET /metrics HTTP/1.1\r\nHost: test\r\nConnection: close\r\n\r\n")?;
    let mut response = String::new();
    stream.read_to_string(&mut response)?;
    Ok(response)
}

#[test]
fn a_request_line_without_end_is_cut_off_and_scrapes_still_answer() {
    const LIMIT: usize = 32 << 20;
    let (_listen, address) = listen("30");
    let mut stream = TcpStream::connect(&address).unwrap();
    stream.set_write_timeout(Some(Duration::from_secs(2))).unwrap();
    stream.write_all(b"GET /").unwrap();
    let chunk = vec![b'a'; 64 << 10];
    let started = Instant::now();
    let mut sent = 0;
    let mut refused = None;
    // Socket buffers hold a few MB; past them, a server that stopped reading refuses more.
    while sent < LIMIT && started.elapsed() < Duration::from_secs(10) {
        match stream.write(&chunk) {
            Ok(n) => sent += n,
            Err(e) => {
                refused = Some(e);
                break;
            }
        }
    }
    assert!(refused.is_some(), "the server took {sent} bytes of one request line");
    drop(stream);
    let response = scrape(&address, Duration::from_secs(3)).expect("a scrape right after");
    assert!(response.starts_with("HTTP/1.1 200 OK\r\n"), "{response}");
    assert!(response.contains("kvroute_events_total"), "{response}");
}

#[test]
fn a_slow_client_blocks_neither_a_scrape_nor_the_end_of_listen() {
    let (mut listen, address) = listen("4");
    let started = Instant::now();
    let trickle = {
        let address = address.clone();
        std::thread::spawn(move || {
            let Ok(mut stream) = TcpStream::connect(&address) else { return };
            // One byte every 1.5 s, for longer than listen runs; stops at the first refusal.
            for byte in b"GET /metrics".iter().cycle().take(8) {
                if stream.write_all(&[*byte]).is_err() {
                    return;
                }
                std::thread::sleep(Duration::from_millis(1500));
            }
        })
    };
    std::thread::sleep(Duration::from_millis(500));
    let response = scrape(&address, Duration::from_secs(2))
        .expect("a scrape answers while a slow client is connected");
    assert!(response.starts_with("HTTP/1.1 200 OK\r\n"), "{response}");
    loop {
        if let Some(status) = listen.0.try_wait().unwrap() {
            assert!(status.success(), "listen exited with {status}");
            break;
        }
        assert!(started.elapsed() < Duration::from_secs(8), "listen --duration 4 still runs");
        std::thread::sleep(Duration::from_millis(100));
    }
    trickle.join().unwrap();
}
