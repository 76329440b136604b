//! `kvroute demo`: mock engines and the gateway as child processes, the trace replayed over HTTP
//! once per policy; its table must hold one row per policy, every request answered.

#![cfg(not(loom))]

use std::process::Command;

#[test]
fn the_demo_replays_every_policy_through_real_processes() {
    let output = Command::new(env!("CARGO_BIN_EXE_kvroute"))
        .args([
            "demo",
            "--workers",
            "2",
            "--limit",
            "40",
            "--speedup",
            "20",
            "--max-output",
            "4",
            "--quiet",
        ])
        .output()
        .unwrap();
    let stdout = String::from_utf8_lossy(&output.stdout);
    assert!(output.status.success(), "{stdout}\n{}", String::from_utf8_lossy(&output.stderr));
    let rows: Vec<Vec<&str>> = stdout
        .lines()
        .skip_while(|l| !l.starts_with("target"))
        .skip(2)
        .map(|l| l.split_whitespace().collect())
        .collect();
    let policies: Vec<&str> = rows.iter().map(|r| r[0]).collect();
    assert_eq!(policies, ["kv-aware", "approximate", "round-robin"], "{stdout}");
    for row in &rows {
        assert_eq!((row[1], row[2]), ("40", "0"), "40 requests, no errors: {stdout}");
        let hit: f64 = row[3].parse().unwrap();
        assert!((0.0..=100.0).contains(&hit), "{stdout}");
    }
}
