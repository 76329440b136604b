"""The example gateway (examples/gateway.py) served by uvicorn on loopback in front of two real
`kvroute mocker` engines, fed by their vLLM-style ZMQ KV events: a request sharing a long prefix
with an earlier one goes to the engine that cached it, and that engine's own prefix cache hits.

The mocker binary comes from KVROUTE_BIN, else the workspace's target directory (`checked` or
`release` profile, as the repository's scripts/test builds it), else it is built here."""

import importlib.util
import os
import re
import selectors
import subprocess
import threading
import time
from pathlib import Path

import pytest

from conftest import REPO

httpx = pytest.importorskip("httpx")
uvicorn = pytest.importorskip("uvicorn")
tokenizers = pytest.importorskip("tokenizers")
pytest.importorskip("fastapi")

BLOCK = 16
MODEL = "mock-model"
TOKENIZER = REPO / "data" / "tokenizer"
KV_EVENTS = ('{"enable_kv_cache_events": true, "publisher": "zmq", "endpoint": "tcp://127.0.0.1:*", '
             '"replay_endpoint": "tcp://127.0.0.1:*"}')


def kvroute_binary() -> Path:
    if os.environ.get("KVROUTE_BIN"):
        return Path(os.environ["KVROUTE_BIN"])
    targets = [Path(os.environ["CARGO_TARGET_DIR"])] if os.environ.get("CARGO_TARGET_DIR") else []
    targets.append(REPO / "target")
    for target in targets:
        for profile in ("checked", "release"):
            if (target / profile / "kvroute").is_file():
                return target / profile / "kvroute"
    subprocess.run(["cargo", "build", "--profile", "checked", "-p", "kvroute-cli", "--bin", "kvroute"],
                   cwd=REPO, check=True, timeout=1800)
    return targets[0] / "checked" / "kvroute"


def start_mocker(binary: Path):
    """A mock vLLM engine on a free loopback port; returns (process, READY line's words)."""
    proc = subprocess.Popen(
        [str(binary), "mocker", "--listen", "127.0.0.1:0", "--model", MODEL, "--tokenizer", str(TOKENIZER),
         "--block-size", str(BLOCK), "--speedup", "100", "--kv-events-config", KV_EVENTS, "--duration", "300"],
        stdout=subprocess.PIPE, text=True)
    try:
        sel = selectors.DefaultSelector()
        sel.register(proc.stdout, selectors.EVENT_READ)
        assert sel.select(timeout=30), "the mocker did not print READY within 30 s"
        words = proc.stdout.readline().split()
        assert words[:1] == ["READY"] and words[2].startswith("kv-events=") and words[3].startswith("replay="), words
        return proc, words
    except BaseException:
        proc.kill()
        proc.wait()
        raise


def load_gateway():
    spec = importlib.util.spec_from_file_location("gateway", REPO / "python" / "examples" / "gateway.py")
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def prefix_cache_hits(client, url) -> float:
    text = client.get(f"{url}/metrics").text
    return float(re.search(r"^vllm:prefix_cache_hits_total\{[^}]*\} (\S+)$", text, re.M).group(1))


def wait_until(what, cond, timeout=20.0):
    deadline = time.monotonic() + timeout
    while not cond():
        assert time.monotonic() < deadline, f"timed out waiting for {what}"
        time.sleep(0.02)


def common_prefix(a, b) -> int:
    return next((i for i, (x, y) in enumerate(zip(a, b)) if x != y), min(len(a), len(b)))


def test_gateway_sends_a_shared_prefix_to_the_mocker_that_cached_it():
    binary = kvroute_binary()
    mockers, server, thread = {}, None, None
    try:
        for worker in (1, 2):
            mockers[worker] = start_mocker(binary)
        urls = {w: words[1] for w, (_, words) in mockers.items()}
        events = {w: f"{words[2].split('=', 1)[1]}+{words[3].split('=', 1)[1]}" for w, (_, words) in mockers.items()}
        tok = tokenizers.Tokenizer.from_file(str(TOKENIZER / "tokenizer.json"))
        app = load_gateway().create_app(urls, tok, kv_events=events, block_size=BLOCK)
        router = app.state.router
        server = uvicorn.Server(uvicorn.Config(app, host="127.0.0.1", port=0, log_level="warning"))
        thread = threading.Thread(target=server.run, daemon=True)
        thread.start()
        wait_until("uvicorn to start", lambda: server.started)
        base = f"http://127.0.0.1:{server.servers[0].sockets[0].getsockname()[1]}"

        with httpx.Client(timeout=20) as client:
            def complete(prompt):
                r = client.post(f"{base}/v1/completions", json={"model": MODEL, "prompt": prompt, "max_tokens": 4})
                assert r.status_code == 200, r.text
                body = r.json()
                tokens = tok.encode(prompt).ids
                # The engine's answer, through the gateway; it tokenized the prompt as the gateway did.
                assert body["object"] == "text_completion" and body["choices"][0]["text"]
                assert body["usage"]["prompt_tokens"] == len(tokens)
                assert body["kvroute"]["request_blocks"] == len(tokens) // BLOCK
                return body["kvroute"], tokens

            for family in range(3):
                document = " ".join(f"Section {family}.{i} says the {i * 7 % 13}th rule holds." for i in range(60))
                first, first_tokens = complete(f"{document}\nQuestion: what does it say first?")
                worker = first["worker_id"]
                # The engine's KV events for that prompt reach the router.
                wait_until("the first prompt's blocks", lambda: router.overlap_blocks(
                    first_tokens, worker) == len(first_tokens) // BLOCK)
                for question in ("what is the 5th rule?", "summarize it."):
                    hits = {w: prefix_cache_hits(client, url) for w, url in urls.items()}
                    decision, tokens = complete(f"{document}\nQuestion: {question}")
                    shared = common_prefix(first_tokens, tokens) // BLOCK
                    assert shared >= 30
                    assert decision["worker_id"] == worker and decision["overlap_blocks"] == shared
                    # The chosen engine served those blocks from its cache; the other saw nothing.
                    after = {w: prefix_cache_hits(client, url) for w, url in urls.items()}
                    assert after[worker] - hits[worker] == shared * BLOCK
                    assert all(after[w] == hits[w] for w in urls if w != worker)

            stats = client.get(f"{base}/stats").json()
            assert stats["router"]["decisions"] == 9 and stats["router"]["workers"] == 2
            assert sum(s["events"] for s in stats["kv_events"]) > 0
            assert all(s["decode_errors"] == 0 for s in stats["kv_events"])
        # Every request was freed once its engine answered.
        assert all(load["active_requests"] == 0 for load in router.potential_loads([1, 2, 3]))
    finally:
        if server is not None:
            server.should_exit = True
            thread.join(timeout=10)
        for proc, _ in mockers.values():
            proc.terminate()
            try:
                proc.wait(timeout=10)
            except subprocess.TimeoutExpired:
                proc.kill()
                proc.wait()
