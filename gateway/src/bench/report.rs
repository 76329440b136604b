//! What one replay measured, and its table row.

use std::time::Duration;

/// One request's measurements.
#[derive(Clone, Debug, Default)]
pub struct Sample {
    /// When it was sent, from the replay's start.
    pub sent: Duration,
    /// Time to its first token.
    pub ttft: Option<Duration>,
    /// Time to its last token.
    pub last_token: Option<Duration>,
    /// Tokens received.
    pub tokens: usize,
    /// Why it failed, if it did.
    pub error: Option<String>,
}

/// A replay's summary.
#[derive(Clone, Debug)]
pub struct BenchReport {
    /// Every request, in trace order.
    pub samples: Vec<Sample>,
    /// Wall time of the whole replay.
    pub wall: Duration,
    /// The arrivals' speed-up.
    pub speedup: f64,
    /// The fleet's prefix-cache hit rate (tokens), from the engines' metrics.
    pub hit_rate: Option<f64>,
}

/// The p50 and p99 of a set of seconds.
#[derive(Clone, Copy, Debug, Default, PartialEq)]
pub struct Percentiles {
    /// Median.
    pub p50: f64,
    /// 99th percentile.
    pub p99: f64,
}

/// Nearest-rank percentiles of `values` (0 for none).
pub fn percentiles(mut values: Vec<f64>) -> Percentiles {
    if values.is_empty() {
        return Percentiles::default();
    }
    values.sort_by(f64::total_cmp);
    let at =
        |q: f64| values[((q * values.len() as f64).ceil() as usize).clamp(1, values.len()) - 1];
    Percentiles { p50: at(0.50), p99: at(0.99) }
}

impl BenchReport {
    /// The summary of `samples`.
    pub fn new(samples: Vec<Sample>, wall: Duration, speedup: f64, hit_rate: Option<f64>) -> Self {
        Self { samples, wall, speedup, hit_rate }
    }

    fn ok(&self) -> impl Iterator<Item = &Sample> {
        self.samples.iter().filter(|s| s.error.is_none())
    }

    /// Requests that failed.
    pub fn errors(&self) -> usize {
        self.samples.iter().filter(|s| s.error.is_some()).count()
    }

    /// Time to first token, seconds.
    pub fn ttft(&self) -> Percentiles {
        percentiles(self.ok().filter_map(|s| s.ttft).map(|d| d.as_secs_f64()).collect())
    }

    /// Mean time between a request's tokens, seconds.
    pub fn itl(&self) -> Percentiles {
        percentiles(
            self.ok()
                .filter(|s| s.tokens > 1)
                .filter_map(|s| {
                    Some((s.last_token? - s.ttft?).as_secs_f64() / (s.tokens - 1) as f64)
                })
                .collect(),
        )
    }

    /// End-to-end latency, seconds.
    pub fn e2e(&self) -> Percentiles {
        percentiles(self.ok().filter_map(|s| s.last_token).map(|d| d.as_secs_f64()).collect())
    }

    /// Completed requests per second of wall time.
    pub fn requests_per_s(&self) -> f64 {
        self.ok().count() as f64 / self.wall.as_secs_f64().max(1e-9)
    }

    /// Output tokens per second of wall time.
    pub fn tokens_per_s(&self) -> f64 {
        self.ok().map(|s| s.tokens).sum::<usize>() as f64 / self.wall.as_secs_f64().max(1e-9)
    }

    /// The first few distinct error messages.
    pub fn error_kinds(&self) -> Vec<String> {
        let mut kinds: Vec<String> = Vec::new();
        for error in self.samples.iter().filter_map(|s| s.error.as_ref()) {
            if !kinds.contains(error) && kinds.len() < 3 {
                kinds.push(error.clone());
            }
        }
        kinds
    }

    /// The table's header (see [`Self::row`]).
    pub fn header() -> [&'static str; 11] {
        [
            "target",
            "requests",
            "errors",
            "hit %",
            "TTFT p50 s",
            "TTFT p99 s",
            "ITL p50 ms",
            "ITL p99 ms",
            "E2E p50 s",
            "E2E p99 s",
            "req/s",
        ]
    }

    /// One table row, labelled `name`.
    pub fn row(&self, name: &str) -> Vec<String> {
        let (ttft, itl, e2e) = (self.ttft(), self.itl(), self.e2e());
        vec![
            name.to_owned(),
            self.samples.len().to_string(),
            self.errors().to_string(),
            self.hit_rate.map_or("-".into(), |h| format!("{:.1}", h * 100.0)),
            format!("{:.3}", ttft.p50),
            format!("{:.3}", ttft.p99),
            format!("{:.2}", itl.p50 * 1e3),
            format!("{:.2}", itl.p99 * 1e3),
            format!("{:.2}", e2e.p50),
            format!("{:.2}", e2e.p99),
            format!("{:.1}", self.requests_per_s()),
        ]
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn percentiles_are_nearest_rank() {
        let p = percentiles((1..=100).map(f64::from).collect());
        assert_eq!((p.p50, p.p99), (50.0, 99.0));
        assert_eq!(percentiles(vec![]), Percentiles::default());
        assert_eq!(percentiles(vec![3.0]).p99, 3.0);
    }
}
