//! The parent's table: per subject, the median of each figure over its runs, then ours/Dynamo
//! ratios.

use std::fmt::Write as _;

use crate::latency::{DEPTH_BUCKETS, bucket_label};
use crate::outcome::Outcome;

/// One subject's runs (one fresh process each).
pub struct Runs {
    /// The subject's name.
    pub subject: String,
    /// Its outcomes, one per run.
    pub outcomes: Vec<Outcome>,
}

impl Runs {
    fn median(&self, figure: impl Fn(&Outcome) -> Option<f64>) -> Option<f64> {
        let mut values: Vec<f64> = self.outcomes.iter().filter_map(figure).collect();
        if values.is_empty() {
            return None;
        }
        values.sort_by(f64::total_cmp);
        let mid = values.len() / 2;
        Some(if values.len() % 2 == 1 {
            values[mid]
        } else {
            (values[mid - 1] + values[mid]) / 2.0
        })
    }

    fn ingest_ops(&self) -> Option<f64> {
        self.median(|o| Some(o.block_ops_per_sec()))
    }
    fn ingest_events(&self) -> Option<f64> {
        self.median(|o| Some(o.events_per_sec()))
    }
    fn quiet_p50(&self) -> Option<f64> {
        self.median(|o| Some(o.quiet_p50_ns as f64 / 1e3))
    }
    fn quiet_p99(&self) -> Option<f64> {
        self.median(|o| Some(o.quiet_p99_ns as f64 / 1e3))
    }
    fn ahead_p50(&self) -> Option<f64> {
        self.median(|o| Some(o.ahead_p50_ns as f64 / 1e3))
    }
    fn ahead_p99(&self) -> Option<f64> {
        self.median(|o| Some(o.ahead_p99_ns as f64 / 1e3))
    }
    fn busy_p50(&self) -> Option<f64> {
        self.median(|o| o.busy_p50_ns.map(|ns| ns as f64 / 1e3))
    }
    fn busy_p99(&self) -> Option<f64> {
        self.median(|o| o.busy_p99_ns.map(|ns| ns as f64 / 1e3))
    }
    fn bytes(&self) -> Option<f64> {
        self.median(|o| Some(o.bytes_per_entry()))
    }
    fn bytes_untrimmed(&self) -> Option<f64> {
        self.median(|o| Some(o.bytes_per_entry_untrimmed()))
    }
    fn bytes_compacted(&self) -> Option<f64> {
        self.median(Outcome::bytes_per_entry_compacted)
    }
    /// The worst run's disagreements (never a median: one bad run must show).
    fn disagreements(&self) -> (u64, u64) {
        let worst = self.outcomes.iter().max_by_key(|o| o.disagreements);
        worst.map_or((0, 0), |o| (o.disagreements, o.checked))
    }
}

/// Digits grouped by thousands: `12,345,678`.
pub fn grouped(value: u64) -> String {
    let digits = value.to_string();
    let mut out = String::new();
    for (i, c) in digits.chars().enumerate() {
        if i > 0 && (digits.len() - i).is_multiple_of(3) {
            out.push(',');
        }
        out.push(c);
    }
    out
}

fn cell(value: Option<f64>, decimals: usize) -> String {
    value.map_or_else(|| "—".to_string(), |v| format!("{v:.decimals$}"))
}

/// The per-subject table, medians over runs.
pub fn table(all: &[Runs]) -> String {
    let header = [
        "subject",
        "ingest Mops/s",
        "events/s",
        "find p50 µs",
        "find p99 µs",
        "busy p50 µs",
        "busy p99 µs",
        "B/entry",
        "untrimmed",
        "swept",
        "disagree",
        "rejected",
    ];
    let mut rows = vec![header.map(String::from).to_vec()];
    for runs in all {
        let (bad, checked) = runs.disagreements();
        let rejected = runs.outcomes.iter().filter_map(|o| o.rejected).max();
        rows.push(vec![
            runs.subject.clone(),
            cell(runs.ingest_ops().map(|v| v / 1e6), 2),
            runs.ingest_events().map_or("—".into(), |v| grouped(v as u64)),
            cell(runs.quiet_p50(), 2),
            cell(runs.quiet_p99(), 2),
            cell(runs.busy_p50(), 2),
            cell(runs.busy_p99(), 2),
            cell(runs.bytes(), 0),
            cell(runs.bytes_untrimmed(), 0),
            cell(runs.bytes_compacted(), 0),
            format!("{bad}/{checked}"),
            rejected.map_or("—".into(), |r| r.to_string()),
        ]);
    }
    aligned(&rows)
}

/// Quiescent `find_matches` p50 / p99 (µs) per matched-depth bucket, medians over runs, under a
/// line giving each bucket's query count.
pub fn depth_table(all: &[Runs]) -> String {
    let counts: Vec<u64> = all
        .first()
        .and_then(|r| r.outcomes.first())
        .map(|o| o.quiet_by_depth.iter().map(|b| b.count).collect())
        .unwrap_or_default();
    let buckets: Vec<String> = DEPTH_BUCKETS
        .iter()
        .enumerate()
        .map(|(i, &b)| {
            format!("{} ({})", bucket_label(b), grouped(counts.get(i).copied().unwrap_or(0)))
        })
        .collect();
    let mut out = format!("queries by deepest match in blocks: {}\n", buckets.join(", "));
    let mut header = vec!["µs by deepest match".to_string()];
    for &bucket in &DEPTH_BUCKETS {
        header.push(format!("{} p50", bucket_label(bucket)));
        header.push(format!("{} p99", bucket_label(bucket)));
    }
    let mut rows = vec![header];
    for runs in all {
        let mut row = vec![runs.subject.clone()];
        for i in 0..DEPTH_BUCKETS.len() {
            let bucket = |o: &Outcome| o.quiet_by_depth.get(i).filter(|b| b.count > 0).copied();
            row.push(cell(runs.median(|o| bucket(o).map(|b| b.p50_ns as f64 / 1e3)), 2));
            row.push(cell(runs.median(|o| bucket(o).map(|b| b.p99_ns as f64 / 1e3)), 2));
        }
        rows.push(row);
    }
    out.push_str(&aligned(&rows));
    out
}

/// `ours / theirs` for every figure, against each Dynamo subject present.
pub fn ratios(all: &[Runs], ours: &str) -> String {
    let find = |name: &str| all.iter().find(|r| r.subject == name);
    let Some(our) = find(ours) else { return String::new() };
    let theirs: Vec<&Runs> =
        ["dynamo-crtc", "dynamo-radix"].iter().filter_map(|n| find(n)).collect();
    let mut header = vec![format!("{ours} / Dynamo"), "better".to_string()];
    header.extend(theirs.iter().map(|t| format!("vs {}", t.subject)));
    let mut rows = vec![header];
    type Figure = fn(&Runs) -> Option<f64>;
    let figures: [(&str, &str, Figure); 10] = [
        ("ingest block-ops/s", "higher", Runs::ingest_ops),
        ("find p50 quiescent", "lower", Runs::quiet_p50),
        ("find p99 quiescent", "lower", Runs::quiet_p99),
        ("find p50 quiescent, built ahead", "lower", Runs::ahead_p50),
        ("find p99 quiescent, built ahead", "lower", Runs::ahead_p99),
        ("find p50 while ingesting", "lower", Runs::busy_p50),
        ("find p99 while ingesting", "lower", Runs::busy_p99),
        ("bytes/entry", "lower", Runs::bytes),
        ("bytes/entry untrimmed", "lower", Runs::bytes_untrimmed),
        ("bytes/entry vs their swept", "lower", Runs::bytes_compacted),
    ];
    for (label, better, figure) in figures {
        let mut row = vec![label.to_string(), better.to_string()];
        for their in &theirs {
            // We have no deferred sweep: our plain figure against their swept one.
            let mine = if label.ends_with("swept") { our.bytes() } else { figure(our) };
            let other = figure(their);
            row.push(match (mine, other) {
                (Some(m), Some(t)) if t > 0.0 => format!("{:.2}×", m / t),
                _ => "—".to_string(),
            });
        }
        rows.push(row);
    }
    aligned(&rows)
}

/// Per shape, kvroute / dynamo-crtc for the figures with a target: the median of the
/// ratios taken within each run (the two subjects' i-th runs ran back to back) and their range;
/// bytes per entry and disagreements are kvroute's own (median, worst run). The quiescent pass
/// on queries built before the pass (cold queries; no target) is shown beside them.
pub fn summary(shapes: &[(String, Vec<Runs>)]) -> String {
    type Figure = fn(&Outcome) -> Option<f64>;
    let figures: [(&str, &str, Figure); 7] = [
        ("ingest ×", ">= 2", |o| Some(o.block_ops_per_sec())),
        ("find p50 ×", "<= 0.5", |o| Some(o.quiet_p50_ns as f64)),
        ("find p99 ×", "<= 0.5", |o| Some(o.quiet_p99_ns as f64)),
        ("busy p50 ×", "<= 0.5", |o| o.busy_p50_ns.map(|ns| ns as f64)),
        ("busy p99 ×", "<= 0.5", |o| o.busy_p99_ns.map(|ns| ns as f64)),
        ("ahead p50 ×", "none", |o| Some(o.ahead_p50_ns as f64)),
        ("ahead p99 ×", "none", |o| Some(o.ahead_p99_ns as f64)),
    ];
    let mut header = vec!["shape".to_string()];
    header.extend(figures.iter().map(|(label, target, _)| format!("{label} ({target})")));
    header.push("B/entry (<= 64)".into());
    header.push("disagree".into());
    let mut rows = vec![header];
    for (shape, all) in shapes {
        let find = |name: &str| all.iter().find(|r| r.subject == name);
        let mut row = vec![shape.clone()];
        let (Some(ours), Some(theirs)) = (find("kvroute"), find("dynamo-crtc")) else {
            row.push("(needs subjects kvroute and dynamo-crtc)".into());
            rows.push(row);
            continue;
        };
        for (_, _, figure) in &figures {
            let mut ratios: Vec<f64> = ours
                .outcomes
                .iter()
                .zip(&theirs.outcomes)
                .filter_map(|(o, t)| Some(figure(o)? / figure(t)?))
                .filter(|r| r.is_finite())
                .collect();
            ratios.sort_by(f64::total_cmp);
            row.push(match (ratios.first(), ratios.last()) {
                (Some(lo), Some(hi)) => {
                    let mid = ratios[ratios.len() / 2];
                    format!("{mid:.2} [{lo:.2}–{hi:.2}]")
                }
                _ => "—".into(),
            });
        }
        row.push(cell(ours.bytes(), 0));
        let (bad, checked) = ours.disagreements();
        row.push(format!("{bad}/{checked}"));
        rows.push(row);
    }
    aligned(&rows)
}

/// Columns padded to their widest cell: the first left-aligned, the rest right-aligned.
fn aligned(rows: &[Vec<String>]) -> String {
    let columns = rows.iter().map(Vec::len).max().unwrap_or(0);
    let width = |c: usize| rows.iter().filter_map(|r| r.get(c)).map(|s| s.chars().count()).max();
    let widths: Vec<usize> = (0..columns).map(|c| width(c).unwrap_or(0)).collect();
    let mut out = String::new();
    for (i, row) in rows.iter().enumerate() {
        let mut line = String::new();
        for (c, text) in row.iter().enumerate() {
            let pad = widths[c] - text.chars().count();
            if c == 0 {
                let _ = write!(line, "{text}{}", " ".repeat(pad));
            } else {
                let _ = write!(line, "  {}{text}", " ".repeat(pad));
            }
        }
        out.push_str(line.trim_end());
        out.push('\n');
        if i == 0 {
            let total = widths.iter().sum::<usize>() + 2 * columns.saturating_sub(1);
            out.push_str(&"-".repeat(total));
            out.push('\n');
        }
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn groups_thousands() {
        assert_eq!(grouped(0), "0");
        assert_eq!(grouped(999), "999");
        assert_eq!(grouped(1_000), "1,000");
        assert_eq!(grouped(12_345_678), "12,345,678");
    }

    #[test]
    fn aligns_columns() {
        let rows = vec![vec!["a".into(), "bb".into()], vec!["ccc".into(), "d".into()]];
        assert_eq!(aligned(&rows), "a    bb\n-------\nccc   d\n");
    }
}
