"""`KvRouter.route` from Python: per-call p50/p99 and throughput under 1 and 4 threads.

    python3 python/bench/route_bench.py [--calls 20000] [--seconds 2]

Builds the same state as its Rust counterpart (python/bench/route_bench.rs, run with
`cargo run --release -p kvroute-python --example route_bench`): block size 16, 128-block
prompts (2,048 tokens): 64 prompts, prompt p = the 64 blocks of system prompt p % 8, then 64
blocks of its own; worker p % workers caches prompt p whole. Routes without recording
(update_states off), so the state stays the same through the run.

The "reference" line runs the same 1-to-4-thread measurement on CPython's own `hashlib.sha256`
(which releases the GIL) for a call as long as `route`'s p50: how far such a call can scale here.

Two processes see the shared machine at different moments, so the "interleaved" line also
times, in this process, the Rust call alone (`KvRouter._route_ns`, timed inside as the Rust
benchmark times it) alternating call by call with Python's `route` on the same prompt.
"""

from __future__ import annotations

import argparse
import array
import hashlib
import statistics
import threading
import time
from typing import Any, Callable, List, Sequence

import kvroute

BLOCK = 16
BLOCKS = 128
PROMPTS = 64


def prompt(p: int) -> List[int]:
    half = BLOCKS // 2 * BLOCK
    return [1_000_000 * (p % 8 + 1) + i for i in range(half)] + [50_000_000 + p * 4096 + i for i in range(half)]


def build(workers: int) -> kvroute.KvRouter:
    router = kvroute.KvRouter(BLOCK, seed=42)
    hasher = kvroute.BlockHasher(BLOCK)
    for w in range(workers):
        router.add_worker(w)
    for p in range(PROMPTS):
        w = p % workers
        local, seq = hasher.hash_request(prompt(p))
        router.apply_event(kvroute.RouterEvent.stored(w, p + 1, [(l, s ^ (w + 1)) for l, s in zip(local, seq)]))
    router.flush()
    return router


def per_call(router: kvroute.KvRouter, prompts: Sequence[Any], calls: int) -> List[int]:
    times = []
    clock = time.perf_counter_ns
    route = router.route
    for i in range(calls):
        tokens = prompts[i % PROMPTS]
        t0 = clock()
        route(tokens)
        times.append(clock() - t0)
    return times


def interleaved(router: kvroute.KvRouter, prompts: Sequence[Any], calls: int) -> "tuple[List[int], List[int]]":
    """Python's `route` and the Rust call alone (`_route_ns`, timed inside), alternating call by
    call on the same prompt, so both see the same machine."""
    py_times, rust_times = [], []
    clock = time.perf_counter_ns
    route, rust = router.route, router._route_ns
    for i in range(calls):
        tokens = prompts[i % PROMPTS]
        if i % 2:
            rust_times.append(rust(tokens))
        t0 = clock()
        route(tokens)
        py_times.append(clock() - t0)
        if not i % 2:
            rust_times.append(rust(tokens))
    return py_times, rust_times


def throughput(router: kvroute.KvRouter, prompts: "List[array.array[int]]", threads: int, seconds: float) -> float:
    route = router.route
    return throughput_of(lambda i: route(prompts[i % PROMPTS]), threads, seconds)


def gil_reference(call_us: float, seconds: float) -> str:
    """The same 1-to-4-thread measurement on CPython's own `hashlib.sha256`, which releases the GIL
    while it hashes more than 2 KiB, over a buffer sized so one call takes about `call_us`: how
    far any call of that length that releases the GIL scales with this interpreter and machine."""
    probe = b"x" * 65536
    started = time.perf_counter_ns()
    for _ in range(200):
        hashlib.sha256(probe)
    ns_per_byte = (time.perf_counter_ns() - started) / 200 / len(probe)
    data = b"x" * max(4096, int(call_us * 1000 / ns_per_byte))
    one = throughput_of(lambda _: hashlib.sha256(data), 1, seconds)
    four = throughput_of(lambda _: hashlib.sha256(data), 4, seconds)
    return (f"hashlib.sha256 of {len(data) // 1024} KiB (~{call_us:.1f} us, GIL released inside): "
            f"1 thread {one:,.0f}/s, 4 threads {four:,.0f}/s ({four / one:.2f}x)")


def throughput_of(call: Callable[[int], object], threads: int, seconds: float) -> float:
    """Calls per second of `call(i)` (i counts each thread's calls, offset by the thread) from
    `threads` threads over `seconds`."""
    counts = [0] * threads
    start = threading.Barrier(threads + 1)
    stop = threading.Event()

    def run(k: int) -> None:
        n = 0
        start.wait()
        while not stop.is_set():
            for j in range(64):
                call(n + j + k)
            n += 64
        counts[k] = n

    pool = [threading.Thread(target=run, args=(k,)) for k in range(threads)]
    for t in pool:
        t.start()
    start.wait()
    t0 = time.perf_counter()
    time.sleep(seconds)
    stop.set()
    for t in pool:
        t.join()
    return sum(counts) / (time.perf_counter() - t0)


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--calls", type=int, default=20000)
    ap.add_argument("--seconds", type=float, default=2.0)
    args = ap.parse_args()
    for workers in (16, 64):
        router = build(workers)
        prompts = [array.array("I", prompt(p)) for p in range(PROMPTS)]
        lists = [prompt(p) for p in range(PROMPTS)]
        per_call(router, prompts, 2000)  # warm up
        times = sorted(per_call(router, prompts, args.calls))
        p50 = statistics.median(times) / 1000
        p99 = times[int(len(times) * 0.99)] / 1000
        ltimes = sorted(per_call(router, lists, args.calls // 4))
        print(f"python workers={workers} array('I'): p50 {p50:.2f} us  p99 {p99:.2f} us")
        print(f"python workers={workers} list[int]:  p50 {statistics.median(ltimes) / 1000:.2f} us  "
              f"p99 {ltimes[int(len(ltimes) * 0.99)] / 1000:.2f} us")
        py_t, rust_t = (sorted(t) for t in interleaved(router, prompts, args.calls))
        py50, rust50 = statistics.median(py_t) / 1000, statistics.median(rust_t) / 1000
        print(f"python workers={workers} interleaved: python p50 {py50:.2f} us  p99 "
              f"{py_t[int(len(py_t) * 0.99)] / 1000:.2f} us, rust inside p50 {rust50:.2f} us  p99 "
              f"{rust_t[int(len(rust_t) * 0.99)] / 1000:.2f} us: python - rust p50 {py50 - rust50:.2f} us")
        one = throughput(router, prompts, 1, args.seconds)
        four = throughput(router, prompts, 4, args.seconds)
        print(f"python workers={workers} throughput: 1 thread {one:,.0f}/s, 4 threads {four:,.0f}/s "
              f"({four / one:.2f}x)")
        print(f"python workers={workers} reference: {gil_reference(p50, args.seconds)}")


if __name__ == "__main__":
    main()
