//! The Python side of the ZMQ tests: `scripts/zmq_publisher.py` needs python3 with pyzmq and
//! msgspec. A test that needs it checks first, so a machine without them fails with one line
//! saying how to get them rather than with a timeout.

use std::process::{Command, Stdio};

/// Panics with one line saying how to install them unless `python3` can import `zmq` and
/// `msgspec`.
pub fn require_zmq_publisher() {
    let imports = Command::new("python3")
        .args(["-c", "import zmq, msgspec"])
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .status();
    if !matches!(imports, Ok(status) if status.success()) {
        panic!(
            "python3 with pyzmq and msgspec is missing: run scripts/test (installs them) or `pip install pyzmq msgspec`"
        );
    }
}
