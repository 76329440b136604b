//! `kvroute route`: route requests read from stdin, one decision per line, for scripting.
//!
//! Input: one request per line, its token ids separated by whitespace. Output: one line per
//! request, `<worker id> <dp rank> <overlap blocks> <prompt blocks>`, flushed as it is decided
//! (so a script can drive it line by line). Bad input (a token that is not a `u32`, an empty
//! line) stops with one error naming the line.

use std::io::{self, BufRead, Write};

use kvroute::Worker;
use kvroute::router::{RouteRequest, RouterConfig};
use kvroute::sequences::RequestId;

use crate::replicas::NatsArgs;

#[derive(clap::Args, Debug)]
pub struct RouteArgs {
    /// Workers 0..N (dp rank 0); ignored if --worker is given.
    #[arg(long, default_value_t = 4)]
    workers: u64,
    /// A worker as ID or ID:DP_RANK (repeat for each worker); replaces --workers.
    #[arg(long = "worker", value_name = "ID[:DP_RANK]", value_parser = parse_worker)]
    worker: Vec<Worker>,
    /// Tokens per KV block.
    #[arg(long, default_value_t = 16)]
    block_size: u32,
    /// Record each routed request as in flight (id `line-<N>`; with --nats
    /// `line-<ROUTER_ID>-<N>`, unique across replicas), so later lines see its load (and, with
    /// --nats, the peers do too).
    #[arg(long)]
    record: bool,
    /// Index the router's own decisions (approximate mode), so later lines that share a
    /// prefix with earlier ones follow them.
    #[arg(long)]
    approximate: bool,
    /// Seed of the router's tie-breaking.
    #[arg(long, default_value_t = 0)]
    seed: u64,
    #[command(flatten)]
    nats: NatsArgs,
}

fn parse_worker(text: &str) -> Result<Worker, String> {
    let number = |part: &str, what: &str| {
        part.trim().parse::<u64>().map_err(|_| format!("{what} {part:?} is not a number"))
    };
    match text.split_once(':') {
        None => Ok(Worker::new(number(text, "worker id")?, 0)),
        Some((id, rank)) => {
            let rank = u32::try_from(number(rank, "dp rank")?)
                .map_err(|_| format!("dp rank {rank:?} is too large"))?;
            Ok(Worker::new(number(id, "worker id")?, rank))
        }
    }
}

/// Parses one input line into token ids.
pub fn parse_tokens(line: &str, out: &mut Vec<u32>) -> Result<(), String> {
    out.clear();
    for token in line.split_whitespace() {
        let id = token.parse::<u32>().map_err(|_| {
            format!("{token:?} is not a token id (a whole number in 0..={})", u32::MAX)
        })?;
        out.push(id);
    }
    if out.is_empty() {
        return Err("no token ids (an empty line is not a request)".into());
    }
    Ok(())
}

pub fn run(args: &RouteArgs) -> Result<(), String> {
    if args.workers == 0 && args.worker.is_empty() {
        return Err("no workers: give --workers N (N > 0) or --worker ID".into());
    }
    let config = RouterConfig {
        use_kv_events: !args.approximate,
        seed: Some(args.seed),
        ..RouterConfig::new(args.block_size)
    };
    let (router, joined) = args.nats.build_router(config, |router| {
        if args.worker.is_empty() {
            (0..args.workers).for_each(|id| router.add_worker(Worker::new(id, 0)));
        } else {
            args.worker.iter().for_each(|&worker| router.add_worker(worker));
        }
    })?;
    let stdin = io::stdin().lock();
    let mut stdout = io::stdout().lock();
    let mut tokens = Vec::new();
    // Replicas share one id space: a peer's `line-1` is in this tracker too.
    let prefix = joined.router_id().map_or_else(|| "line-".to_owned(), |id| format!("line-{id}-"));
    for (index, line) in stdin.lines().enumerate() {
        let number = index + 1;
        let line = line.map_err(|e| format!("reading stdin, line {number}: {e}"))?;
        parse_tokens(&line, &mut tokens).map_err(|e| format!("line {number}: {e}"))?;
        let id = RequestId::from(format!("{prefix}{number}").as_str());
        let request = RouteRequest::tokens(&tokens).with_id(id).update_states(args.record);
        let decision = router.route(&request).map_err(|e| format!("line {number}: {e}"))?;
        if args.approximate {
            // The next line should see this decision in the index.
            router.flush().map_err(|e| format!("line {number}: {e}"))?;
        }
        let written = writeln!(
            stdout,
            "{} {} {} {}",
            decision.worker.id.0,
            decision.worker.dp_rank.0,
            decision.overlap_blocks,
            decision.request_blocks
        )
        .and_then(|()| stdout.flush());
        match written {
            Ok(()) => {}
            // The reader is gone (`| head`): nothing more to say.
            Err(e) if e.kind() == io::ErrorKind::BrokenPipe => break,
            Err(e) => return Err(format!("writing stdout: {e}")),
        }
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn lines_parse_into_tokens_or_a_clear_error() {
        let mut tokens = Vec::new();
        parse_tokens(" 1 2\t3 ", &mut tokens).expect("valid");
        assert_eq!(tokens, [1, 2, 3]);
        let error = parse_tokens("1 x 3", &mut tokens).expect_err("x");
        assert!(error.contains("\"x\" is not a token id"), "{error}");
        assert!(parse_tokens("1 4294967296", &mut tokens).is_err());
        assert!(parse_tokens("-1", &mut tokens).is_err());
        assert!(parse_tokens("   ", &mut tokens).expect_err("empty").contains("no token ids"));
    }

    #[test]
    fn workers_parse_with_an_optional_rank() {
        assert_eq!(parse_worker("7"), Ok(Worker::new(7, 0)));
        assert_eq!(parse_worker("7:2"), Ok(Worker::new(7, 2)));
        assert!(parse_worker("7:").is_err());
        assert!(parse_worker("a:1").is_err());
        assert!(parse_worker("1:99999999999").is_err());
    }
}
