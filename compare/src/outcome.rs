//! [`Outcome`]: what one child process measured for one subject, and the one-line text form in
//! which it reports it to the parent.

use std::collections::BTreeMap;
use std::fmt;

use crate::latency::BucketLatency;

/// The prefix of the machine-readable result line a child prints.
pub const PREFIX: &str = "RESULT";

/// One subject's measurements in one fresh process. Times in nanoseconds, memory in bytes.
#[derive(Clone, Debug, Default, PartialEq)]
pub struct Outcome {
    /// The subject's name.
    pub subject: String,
    /// Events in the stream.
    pub events: u64,
    /// Block operations in the stream (blocks stored plus blocks removed).
    pub block_ops: u64,
    /// From the first event applied until the flush after the last returned.
    pub ingest_ns: u64,
    /// Live (worker, block) entries after the stream, as the reference index counts them.
    pub live_entries: u64,
    /// RSS growth over the ingest, after `malloc_trim` (live data).
    pub rss_growth: u64,
    /// RSS growth over the ingest as the process holds it, before `malloc_trim`.
    pub rss_growth_untrimmed: u64,
    /// RSS growth over the ingest, measured again after the subject's forced maintenance.
    pub rss_growth_compacted: Option<u64>,
    /// Queries timed while nothing is ingested, each built just before its call.
    pub quiet_queries: u64,
    /// `find_matches` median while nothing is ingested.
    pub quiet_p50_ns: u64,
    /// `find_matches` 99th percentile while nothing is ingested.
    pub quiet_p99_ns: u64,
    /// The quiescent latencies split by the matched depth of their query
    /// ([`crate::latency::DEPTH_BUCKETS`]).
    pub quiet_by_depth: Vec<BucketLatency>,
    /// The quiescent median again, in a second pass whose queries were all built before it
    /// (so each is out of the core's caches when called).
    pub ahead_p50_ns: u64,
    /// The 99th percentile of that pass.
    pub ahead_p99_ns: u64,
    /// Queries timed while another thread ingests (0 for single-threaded subjects).
    pub busy_queries: u64,
    /// `find_matches` median while another thread ingests.
    pub busy_p50_ns: Option<u64>,
    /// `find_matches` 99th percentile while another thread ingests.
    pub busy_p99_ns: Option<u64>,
    /// Queries whose scores were compared with the reference's.
    pub checked: u64,
    /// Of those, how many differed.
    pub disagreements: u64,
    /// Events the subject rejected, where it reports them.
    pub rejected: Option<u64>,
}

impl Outcome {
    /// Block operations per second of ingest.
    pub fn block_ops_per_sec(&self) -> f64 {
        self.block_ops as f64 / (self.ingest_ns as f64 / 1e9)
    }

    /// Events per second of ingest.
    pub fn events_per_sec(&self) -> f64 {
        self.events as f64 / (self.ingest_ns as f64 / 1e9)
    }

    /// RSS growth per live entry.
    pub fn bytes_per_entry(&self) -> f64 {
        self.rss_growth as f64 / self.live_entries.max(1) as f64
    }

    /// Untrimmed RSS growth per live entry.
    pub fn bytes_per_entry_untrimmed(&self) -> f64 {
        self.rss_growth_untrimmed as f64 / self.live_entries.max(1) as f64
    }

    /// RSS growth per live entry after forced maintenance, if the subject has any.
    pub fn bytes_per_entry_compacted(&self) -> Option<f64> {
        self.rss_growth_compacted.map(|g| g as f64 / self.live_entries.max(1) as f64)
    }

    /// Parses a line printed by [`Outcome`]'s `Display`; `None` if it is not one.
    pub fn parse(line: &str) -> Option<Self> {
        let rest = line.strip_prefix(PREFIX)?;
        let fields: BTreeMap<&str, &str> =
            rest.split_whitespace().filter_map(|kv| kv.split_once('=')).collect();
        let num = |key: &str| fields.get(key)?.parse::<u64>().ok();
        let opt = |key: &str| match fields.get(key) {
            Some(&"-") => Some(None),
            Some(value) => value.parse::<u64>().ok().map(Some),
            None => None,
        };
        Some(Self {
            subject: fields.get("subject")?.to_string(),
            events: num("events")?,
            block_ops: num("block_ops")?,
            ingest_ns: num("ingest_ns")?,
            live_entries: num("live_entries")?,
            rss_growth: num("rss_growth")?,
            rss_growth_untrimmed: num("rss_growth_untrimmed")?,
            rss_growth_compacted: opt("rss_growth_compacted")?,
            quiet_queries: num("quiet_queries")?,
            quiet_p50_ns: num("quiet_p50_ns")?,
            quiet_p99_ns: num("quiet_p99_ns")?,
            quiet_by_depth: fields
                .get("quiet_by_depth")?
                .split(',')
                .filter(|b| !b.is_empty())
                .map(|b| {
                    let mut it = b.split(':').map(|n| n.parse::<u64>().ok());
                    let (count, p50_ns, p99_ns) = (it.next()??, it.next()??, it.next()??);
                    Some(BucketLatency { count, p50_ns, p99_ns })
                })
                .collect::<Option<Vec<_>>>()?,
            ahead_p50_ns: num("ahead_p50_ns")?,
            ahead_p99_ns: num("ahead_p99_ns")?,
            busy_queries: num("busy_queries")?,
            busy_p50_ns: opt("busy_p50_ns")?,
            busy_p99_ns: opt("busy_p99_ns")?,
            checked: num("checked")?,
            disagreements: num("disagreements")?,
            rejected: opt("rejected")?,
        })
    }
}

/// `-` for `None`.
struct Opt(Option<u64>);

impl fmt::Display for Opt {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self.0 {
            Some(value) => write!(f, "{value}"),
            None => f.write_str("-"),
        }
    }
}

impl fmt::Display for Outcome {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(
            f,
            "{PREFIX} subject={} events={} block_ops={} ingest_ns={} live_entries={} rss_growth={} \
             rss_growth_untrimmed={} rss_growth_compacted={} quiet_queries={} quiet_p50_ns={} quiet_p99_ns={} \
             quiet_by_depth={} ahead_p50_ns={} ahead_p99_ns={} busy_queries={} busy_p50_ns={} busy_p99_ns={} checked={} disagreements={} rejected={}",
            self.subject,
            self.events,
            self.block_ops,
            self.ingest_ns,
            self.live_entries,
            self.rss_growth,
            self.rss_growth_untrimmed,
            Opt(self.rss_growth_compacted),
            self.quiet_queries,
            self.quiet_p50_ns,
            self.quiet_p99_ns,
            self.quiet_by_depth
                .iter()
                .map(|b| format!("{}:{}:{}", b.count, b.p50_ns, b.p99_ns))
                .collect::<Vec<_>>()
                .join(","),
            self.ahead_p50_ns,
            self.ahead_p99_ns,
            self.busy_queries,
            Opt(self.busy_p50_ns),
            Opt(self.busy_p99_ns),
            self.checked,
            self.disagreements,
            Opt(self.rejected),
        )
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_result_line_round_trips() {
        let outcome = Outcome {
            subject: "dynamo-crtc".into(),
            events: 10,
            block_ops: 100,
            ingest_ns: 5_000,
            live_entries: 42,
            rss_growth: 4_096,
            rss_growth_untrimmed: 8_192,
            rss_growth_compacted: Some(2_048),
            quiet_queries: 7,
            quiet_p50_ns: 1_500,
            quiet_p99_ns: 6_000,
            quiet_by_depth: vec![
                BucketLatency { count: 5, p50_ns: 700, p99_ns: 900 },
                BucketLatency { count: 2, p50_ns: 7_000, p99_ns: 9_000 },
            ],
            ahead_p50_ns: 1_900,
            ahead_p99_ns: 7_000,
            busy_queries: 0,
            busy_p50_ns: None,
            busy_p99_ns: Some(9),
            checked: 3,
            disagreements: 0,
            rejected: None,
        };
        assert_eq!(Outcome::parse(&outcome.to_string()), Some(outcome));
        assert_eq!(Outcome::parse("something else"), None);
    }
}
