//! The `kvroute` binary as a user runs it: a replay prints a table that parses, a report is
//! written, and bad input is one error line with exit code 2.

use std::path::PathBuf;
use std::process::{Command, Output};

fn kvroute(args: &[&str]) -> Output {
    Command::new(env!("CARGO_BIN_EXE_kvroute")).args(args).output().expect("the binary runs")
}

/// A small Mooncake-format trace: 30 conversations of 3 turns, each with its own first block.
fn small_trace(dir: &std::path::Path) -> PathBuf {
    let mut lines = String::new();
    for turn in 0..3u64 {
        for c in 0..30u64 {
            let ids: Vec<u64> = (0..=turn * 2 + 1).map(|k| c * 100 + k).collect();
            let ts = (turn * 30 + c) * 200;
            let input = ids.len() * 512 - 7;
            lines.push_str(&format!(
                "{{\"timestamp\": {ts}, \"input_length\": {input}, \"output_length\": 130, \"hash_ids\": {ids:?}}}\n"
            ));
        }
    }
    let path = dir.join("trace.jsonl");
    std::fs::write(&path, lines).unwrap();
    path
}

/// A scratch directory, removed (with what the test wrote there) when the test ends.
struct TempDir(PathBuf);

impl std::ops::Deref for TempDir {
    type Target = std::path::Path;
    fn deref(&self) -> &std::path::Path {
        &self.0
    }
}

impl Drop for TempDir {
    fn drop(&mut self) {
        let _ = std::fs::remove_dir_all(&self.0);
    }
}

fn temp_dir(name: &str) -> TempDir {
    let dir = std::env::temp_dir().join(format!("kvroute-cli-{name}-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    TempDir(dir)
}

#[test]
fn replay_prints_a_table_with_a_row_per_policy_and_writes_the_report() {
    let dir = temp_dir("replay");
    let trace = small_trace(&dir);
    let report = dir.join("report.svg");
    let out = kvroute(&[
        "replay",
        "--trace",
        trace.to_str().unwrap(),
        "--workers",
        "4",
        "--speedup",
        "1",
        "--approximate",
        "--quiet",
        "--report",
        report.to_str().unwrap(),
    ]);
    assert!(out.status.success(), "{}", String::from_utf8_lossy(&out.stderr));
    let stdout = String::from_utf8(out.stdout).unwrap();
    let lines: Vec<&str> = stdout.lines().collect();
    let header = lines.iter().position(|l| l.starts_with("policy")).expect("a header row");
    assert!(lines[header + 1].starts_with("---"));
    let rows: Vec<Vec<&str>> = lines[header + 2..]
        .iter()
        .take_while(|l| !l.starts_with("report"))
        .map(|l| l.split_whitespace().collect())
        .collect();
    let names: Vec<&str> = rows.iter().map(|r| r[0]).collect();
    assert_eq!(names, ["kv-aware", "approximate", "round-robin", "random", "least-loaded"]);
    for row in &rows {
        assert_eq!(row.len(), 12, "{row:?}");
        let hit: f64 = row[1].parse().unwrap();
        let oracle: f64 = row[2].parse().unwrap();
        assert!((0.0..=oracle + 1e-9).contains(&hit), "{row:?}");
        for cell in &row[4..9] {
            cell.parse::<f64>().unwrap();
        }
    }
    let svg = std::fs::read_to_string(&report).unwrap();
    assert!(svg.starts_with("<svg") && svg.contains("kv-aware") && svg.contains("TTFT"));
}

#[test]
fn bad_input_is_one_error_line_and_exit_code_2() {
    let dir = temp_dir("bad");
    let trace = small_trace(&dir);
    let trace = trace.to_str().unwrap();
    let malformed = dir.join("malformed.jsonl");
    let good_line = std::fs::read_to_string(trace).unwrap().lines().next().unwrap().to_string();
    std::fs::write(&malformed, format!("{good_line}\n{{\"timestamp\": 1, \"hash_ids\": [}}\n"))
        .unwrap();
    let cases: [(&[&str], &str); 6] = [
        (&["replay", "--trace", "/nonexistent/trace.jsonl"], "nonexistent"),
        (&["replay", "--trace", malformed.to_str().unwrap()], "line 2"),
        (&["replay", "--trace", trace, "--workers", "0"], "at least one worker"),
        (&["replay", "--trace", trace, "--block-size", "48"], "block size 48"),
        (&["replay", "--trace", trace, "--policies", "fastest"], "unknown policy"),
        (&["replay", "--trace", trace, "--report", "out.png"], ".svg or .html"),
    ];
    for (args, expected) in cases {
        let out = kvroute(args);
        assert_eq!(out.status.code(), Some(2), "{args:?}");
        let stderr = String::from_utf8(out.stderr).unwrap();
        assert_eq!(stderr.trim_end().lines().count(), 1, "{args:?}: {stderr}");
        assert!(stderr.contains(expected), "{args:?}: {stderr}");
    }
}
