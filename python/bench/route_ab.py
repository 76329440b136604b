"""Two builds of the extension in one process: `route`'s per-call cost of an earlier build
against this one's, on the same state, alternating call by call (the Rust call alone beside
them), so the shared machine's drift falls on both alike.

    pip install --no-deps --target /tmp/kvroute-old ./python   # at the earlier commit
    python3 python/bench/route_ab.py /tmp/kvroute-old/kvroute/_kvroute.abi3.so

Same state as route_bench.py (block size 16, 128-block prompts, 16 and 64 workers).
"""

from __future__ import annotations

import array
import importlib.util
import statistics
import sys
import time
from pathlib import Path
from types import ModuleType
from typing import Any, Callable, Dict, List

import kvroute

sys.path.insert(0, str(Path(__file__).parent))
import route_bench as rb  # noqa: E402


def load(path: str) -> ModuleType:
    # The init symbol follows the last part of the name: PyInit__kvroute, as in the package.
    spec = importlib.util.spec_from_file_location("earlier._kvroute", path)
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def build(mod: Any, workers: int) -> Any:
    router = mod.KvRouter(rb.BLOCK, seed=42)
    hasher = mod.BlockHasher(rb.BLOCK)
    for w in range(workers):
        router.add_worker(w)
    for p in range(rb.PROMPTS):
        w = p % workers
        local, seq = hasher.hash_request(rb.prompt(p))
        router.apply_event(mod.RouterEvent.stored(w, p + 1, [(l, s ^ (w + 1)) for l, s in zip(local, seq)]))
    router.flush()
    return router


def main() -> None:
    earlier = load(sys.argv[1])
    calls = int(sys.argv[2]) if len(sys.argv) > 2 else 20000
    for workers in (16, 64):
        old, new = build(earlier, workers), build(kvroute, workers)
        prompts = [array.array("I", rb.prompt(p)) for p in range(rb.PROMPTS)]
        runs: Dict[str, Callable[[Any], Any]] = {"earlier": old.route, "this": new.route, "rust": new._route_ns}
        times: Dict[str, List[int]] = {k: [] for k in runs}
        names = list(runs)
        clock = time.perf_counter_ns
        for i in range(calls):
            tokens = prompts[i % rb.PROMPTS]
            # Each goes first, second and third in turn: the first to touch a prompt pays its misses.
            for name in names[i % 3:] + names[:i % 3]:
                if name == "rust":
                    times[name].append(new._route_ns(tokens))
                    continue
                t0 = clock()
                runs[name](tokens)
                times[name].append(clock() - t0)
        p50 = {k: statistics.median(v) / 1000 for k, v in times.items()}
        print(f"workers={workers}: rust p50 {p50['rust']:.2f} us; earlier build p50 {p50['earlier']:.2f} us "
              f"(+{p50['earlier'] - p50['rust']:.2f}); this build p50 {p50['this']:.2f} us "
              f"(+{p50['this'] - p50['rust']:.2f})")


if __name__ == "__main__":
    main()
