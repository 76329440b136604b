//! `kvroute serve` and `kvroute mocker` as real processes, driven by the official `openai`
//! Python client: scripts/gateway_e2e.py (see there for what it checks). Needs python3 with
//! `openai`, and `nats-server` (scripts/install-test-deps installs both).

#![cfg(not(loom))]

use std::path::PathBuf;
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

fn nats_server() -> PathBuf {
    if let Some(path) = std::env::var_os("NATS_SERVER") {
        return path.into();
    }
    let path = std::env::var_os("PATH").unwrap_or_default();
    std::env::split_paths(&path)
        .chain(["/usr/sbin".into(), "/usr/bin".into()])
        .map(|dir| dir.join("nats-server"))
        .find(|candidate| candidate.is_file())
        .expect("nats-server is missing: sudo apt-get install -y nats-server (or set NATS_SERVER)")
}

#[test]
fn the_gateway_in_front_of_mock_engines_as_the_openai_client_sees_it() {
    let root = PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("..");
    let mut child = Command::new("python3")
        .arg(root.join("scripts/gateway_e2e.py"))
        .args(["--kvroute", env!("CARGO_BIN_EXE_kvroute")])
        .arg("--nats-server")
        .arg(nats_server())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .expect("python3 runs (scripts/install-test-deps installs it with openai)");
    // Bounded: the script takes ~10 s; past 3 minutes it is stuck.
    let deadline = Instant::now() + Duration::from_secs(180);
    while child.try_wait().unwrap().is_none() {
        if Instant::now() > deadline {
            child.kill().unwrap();
            break;
        }
        std::thread::sleep(Duration::from_millis(100));
    }
    let output = child.wait_with_output().unwrap();
    let (stdout, stderr) =
        (String::from_utf8_lossy(&output.stdout), String::from_utf8_lossy(&output.stderr));
    println!("{stdout}");
    assert!(output.status.success(), "gateway_e2e.py failed:\n{stdout}\n{stderr}");
    assert_eq!(stdout.lines().filter(|l| l.starts_with("ok ")).count(), 6, "{stdout}");
}
