//! The closed-loop simulator: every request is served, results are deterministic for a seed,
//! kv-aware routing beats the cache-blind baselines, and traces that start from many different
//! first blocks work as well as the bundled one.

use kvroute::sim::trace::{TraceRequest, read_trace};
use kvroute::sim::{Policy, SimConfig, SimError, SimInput, SimResult, simulate};

/// A Mooncake-format trace of `conversations` conversations, each with its own first block
/// (no shared system prompt), `turns` turns that extend the previous turn's prompt, arriving
/// interleaved.
fn many_roots_trace(conversations: u64, turns: u64) -> Vec<TraceRequest> {
    let mut lines = String::new();
    let mut next_id = 0u64;
    let mut prompts: Vec<Vec<u64>> = (0..conversations).map(|_| Vec::new()).collect();
    for turn in 0..turns {
        for (c, prompt) in prompts.iter_mut().enumerate() {
            for _ in 0..(2 + (c as u64 + turn) % 3) {
                prompt.push(next_id);
                next_id += 1;
            }
            let timestamp = (turn * conversations + c as u64) * 400;
            let input = prompt.len() * 512 - 100;
            lines.push_str(&format!(
                "{{\"timestamp\": {timestamp}, \"input_length\": {input}, \"output_length\": 200, \"hash_ids\": {prompt:?}}}\n"
            ));
        }
    }
    read_trace(lines.as_bytes()).unwrap()
}

fn config() -> SimConfig {
    SimConfig { workers: 4, speedup: 1.0, ..SimConfig::default() }
}

fn run(input: &SimInput, policy: Policy) -> SimResult {
    simulate(input, policy, &config(), &|_| {}).unwrap()
}

#[test]
fn every_policy_serves_every_request_of_a_many_roots_trace() {
    let trace = many_roots_trace(24, 5);
    let input = SimInput::new(&trace, 64).unwrap();
    assert!(input.oracle_hit_rate() > 0.5, "later turns repeat earlier ones");
    for policy in Policy::ALL {
        let result = run(&input, policy);
        assert_eq!(result.requests, trace.len());
        assert!(result.hit_rate <= result.oracle_hit_rate + 1e-9, "{policy}: {result:?}");
        assert!(result.ttft_p50 > 0.0 && result.ttft_p99 >= result.ttft_p50);
        assert!(result.e2e_p50 >= result.ttft_p50 && result.e2e_p99 >= result.e2e_p50);
        assert!(result.imbalance >= 1.0);
        assert_eq!(result.timeline.len(), config().timeline_buckets);
    }
}

#[test]
fn kv_aware_routing_follows_the_cache_where_blind_routing_cannot() {
    // 23 conversations over 4 workers: round-robin moves every conversation each turn.
    let trace = many_roots_trace(23, 5);
    let input = SimInput::new(&trace, 64).unwrap();
    let aware = run(&input, Policy::KvAware);
    let blind = run(&input, Policy::RoundRobin);
    let approximate = run(&input, Policy::Approximate);
    assert!(aware.hit_rate > 2.0 * blind.hit_rate, "{} vs {}", aware.hit_rate, blind.hit_rate);
    assert!(approximate.hit_rate > 2.0 * blind.hit_rate);
    assert!(aware.index_events > 0);
    assert_eq!(approximate.index_events, 0, "approximate mode takes no KV events");
}

#[test]
fn a_run_is_deterministic_for_its_seed() {
    let trace = many_roots_trace(12, 4);
    let input = SimInput::new(&trace, 32).unwrap();
    let config = SimConfig { block_size: 32, ..config() };
    for policy in [Policy::KvAware, Policy::Random, Policy::Approximate] {
        let a = simulate(&input, policy, &config, &|_| {}).unwrap();
        let b = simulate(&input, policy, &config, &|_| {}).unwrap();
        assert_eq!(
            (a.hit_rate, a.ttft_p99, a.e2e_p50, a.imbalance),
            (b.hit_rate, b.ttft_p99, b.e2e_p50, b.imbalance)
        );
        assert_eq!(a.timeline, b.timeline);
    }
}

#[test]
fn bad_configurations_are_typed_errors() {
    let trace = many_roots_trace(2, 1);
    assert_eq!(SimInput::new(&trace, 48).unwrap_err(), SimError::BadBlockSize(48));
    let input = SimInput::new(&trace, 64).unwrap();
    let bad = |config: SimConfig| simulate(&input, Policy::KvAware, &config, &|_| {}).unwrap_err();
    assert_eq!(bad(SimConfig { workers: 0, ..config() }), SimError::NoWorkers);
    assert_eq!(bad(SimConfig { speedup: 0.0, ..config() }), SimError::BadSpeedup(0.0));
    assert_eq!(bad(SimConfig { block_size: 32, ..config() }), SimError::BadBlockSize(32));
}
