//! The results table: one row per policy, aligned columns, units in the header.

use kvroute::sim::SimResult;

/// The column headers, in order.
pub const HEADERS: [&str; 12] = [
    "policy",
    "hit %",
    "oracle %",
    "of oracle",
    "TTFT p50 s",
    "TTFT p99 s",
    "E2E p50 s",
    "E2E p99 s",
    "imbalance",
    "route p50 us",
    "route p99 us",
    "index ev/s",
];

/// The rows' cells, as text.
fn cells(result: &SimResult) -> [String; 12] {
    let policy = result.policy.map_or("?", |p| p.name());
    let router = result.decision_p50_us > 0.0;
    // Two decimals: a decision takes a few microseconds, and one decimal moved the ratio of
    // two policies' times by several percent on rounding alone.
    let micros = |v: f64| if router { format!("{v:.2}") } else { "-".into() };
    [
        policy.to_string(),
        format!("{:.1}", 100.0 * result.hit_rate),
        format!("{:.1}", 100.0 * result.oracle_hit_rate),
        format!("{:.0}%", 100.0 * result.hit_rate / result.oracle_hit_rate.max(1e-12)),
        format!("{:.3}", result.ttft_p50),
        format!("{:.3}", result.ttft_p99),
        format!("{:.2}", result.e2e_p50),
        format!("{:.2}", result.e2e_p99),
        format!("{:.2}", result.imbalance),
        micros(result.decision_p50_us),
        micros(result.decision_p99_us),
        if result.index_events > 0 {
            format!("{:.0}", result.index_events_per_s)
        } else {
            "-".into()
        },
    ]
}

/// The table of `results`: a header, a rule, one row each.
pub fn render(results: &[SimResult]) -> String {
    let rows: Vec<Vec<String>> = results.iter().map(|r| cells(r).to_vec()).collect();
    render_rows(&HEADERS, &rows)
}

/// Any table: `headers`, a rule, then `rows`; the first column left-aligned, the others right.
pub fn render_rows(headers: &[&str], rows: &[Vec<String>]) -> String {
    let mut widths: Vec<usize> = headers.iter().map(|h| h.len()).collect();
    for row in rows {
        for (width, cell) in widths.iter_mut().zip(row) {
            *width = (*width).max(cell.len());
        }
    }
    let line = |cells: &[&str]| {
        let padded: Vec<String> = cells
            .iter()
            .zip(&widths)
            .enumerate()
            .map(
                |(i, (cell, &w))| {
                    if i == 0 { format!("{cell:<w$}") } else { format!("{cell:>w$}") }
                },
            )
            .collect();
        padded.join("  ").trim_end().to_string()
    };
    let mut out = line(headers);
    out.push('\n');
    let rule: Vec<String> = widths.iter().map(|&w| "-".repeat(w)).collect();
    out.push_str(&line(&rule.iter().map(String::as_str).collect::<Vec<_>>()));
    for row in rows {
        out.push('\n');
        out.push_str(&line(&row.iter().map(String::as_str).collect::<Vec<_>>()));
    }
    out
}
