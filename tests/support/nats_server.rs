//! A real `nats-server` for tests and examples: started on a free loopback port, stopped (and
//! restarted on the same port) by its owner, killed on drop.

use std::net::{Ipv4Addr, TcpListener, TcpStream};
use std::path::PathBuf;
use std::process::{Child, Command, Stdio};
use std::thread;
use std::time::{Duration, Instant};

/// A `nats-server` child process on 127.0.0.1.
pub struct NatsServer {
    child: Option<Child>,
    port: u16,
}

/// The server binary: `$NATS_SERVER`, else `nats-server` on the PATH or in the sbin/bin
/// directories Debian's package installs it to.
fn binary() -> PathBuf {
    if let Some(path) = std::env::var_os("NATS_SERVER") {
        return path.into();
    }
    let path = std::env::var_os("PATH").unwrap_or_default();
    let dirs = std::env::split_paths(&path).chain(["/usr/sbin".into(), "/usr/bin".into()]);
    for dir in dirs {
        let candidate = dir.join("nats-server");
        if candidate.is_file() {
            return candidate;
        }
    }
    panic!(
        "nats-server not found: run scripts/test (installs it), `apt-get install nats-server`, or set NATS_SERVER=/path/to/nats-server"
    );
}

fn free_port() -> u16 {
    let listener = TcpListener::bind((Ipv4Addr::LOCALHOST, 0)).expect("bind a loopback port");
    listener.local_addr().expect("its address").port()
}

impl NatsServer {
    /// Starts a server on a free loopback port and waits (≤ 10 s) until it accepts clients.
    pub fn start() -> Self {
        let mut server = Self { child: None, port: free_port() };
        server.restart();
        server
    }

    /// `nats://127.0.0.1:<port>`.
    pub fn url(&self) -> String {
        format!("nats://127.0.0.1:{}", self.port)
    }

    /// Kills the server (its clients see the connection drop).
    pub fn stop(&mut self) {
        if let Some(mut child) = self.child.take() {
            let _ = child.kill();
            let _ = child.wait();
        }
    }

    /// Starts the server again on the same port (stopping it first if it runs).
    pub fn restart(&mut self) {
        self.stop();
        let deadline = Instant::now() + Duration::from_secs(10);
        let child = Command::new(binary())
            .args(["-a", "127.0.0.1", "-p", &self.port.to_string()])
            .stdout(Stdio::null())
            .stderr(Stdio::null())
            .spawn()
            .expect("start nats-server");
        self.child = Some(child);
        while TcpStream::connect((Ipv4Addr::LOCALHOST, self.port)).is_err() {
            let exited = self.child.as_mut().and_then(|child| child.try_wait().ok().flatten());
            assert!(exited.is_none(), "nats-server exited at start: {exited:?}");
            assert!(Instant::now() < deadline, "nats-server did not listen within 10 s");
            thread::sleep(Duration::from_millis(20));
        }
    }
}

impl Drop for NatsServer {
    fn drop(&mut self) {
        self.stop();
    }
}
