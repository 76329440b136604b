#!/usr/bin/env python3
"""`kvroute serve` in front of `kvroute mocker` engines, as real processes on loopback, driven by
the official `openai` client (cli/tests/gateway_e2e.rs runs it).

    python3 scripts/gateway_e2e.py --kvroute target/checked/kvroute --nats-server /usr/sbin/nats-server

Checks, each printed as it passes:
  1. a shared prefix lands on the worker that holds it (chat and completions, streaming and not);
  2. every bad input gets its OpenAI error (unknown model, prompt too long, malformed JSON,
     oversized body, a bad override header);
  3. a mocker killed mid-run costs no client-visible error for requests not yet streaming;
  4. once restarted it is routed to again, and its index heals (its old blocks are forgotten);
  5. two gateway replicas on a real nats-server see each other's load.
Every process is started here and killed on exit, whatever happens.
"""

import argparse
import concurrent.futures
import json
import os
import signal
import socket
import subprocess
import sys
import tempfile
import time
import urllib.request

import openai

MODEL = "mock-model"
PROCESSES = []


def free_port():
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def start(args, ready="READY"):
    """Starts a process and waits for its READY line; returns (process, the line's words)."""
    process = subprocess.Popen(args, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
    PROCESSES.append(process)
    deadline = time.time() + 30
    while time.time() < deadline:
        line = process.stdout.readline()
        if not line:
            raise RuntimeError(f"{args[0:2]} exited: {process.wait()}")
        if line.startswith(ready):
            return process, line.split()
    raise RuntimeError(f"{args[0:2]} not ready in 30 s")


def mocker(kvroute, http_port, pub_port, replay_port, tokenizer, **flags):
    config = json.dumps({
        "enable_kv_cache_events": True, "publisher": "zmq",
        "endpoint": f"tcp://127.0.0.1:{pub_port}", "replay_endpoint": f"tcp://127.0.0.1:{replay_port}",
    })
    args = [kvroute, "mocker", "--listen", f"127.0.0.1:{http_port}", "--model", MODEL,
            "--tokenizer", tokenizer, "--kv-events-config", config, "--max-model-len", "4096"]
    for flag, value in flags.items():
        args += [f"--{flag.replace('_', '-')}", str(value)]
    process, _ = start(args)
    return process


def gateway(kvroute, workers, tokenizer, *extra):
    args = [kvroute, "serve", "--listen", "127.0.0.1:0", "--model", MODEL, "--tokenizer", tokenizer,
            "--health-interval", "0.2", "--max-model-len", "4096", "--first-byte-timeout", "20"]
    for worker in workers:
        args += ["--worker", worker]
    process, words = start(args + list(extra))
    return process, words[1]


def prompt(family, seed, words=40):
    return " ".join([f"family{family} word{i}" for i in range(words)] + [f"own{seed} {i}" for i in range(words)])


def raw_completion(client, **kwargs):
    raw = client.completions.with_raw_response.create(model=MODEL, **kwargs)
    return raw.headers, raw.parse()


def metric(url, name):
    text = urllib.request.urlopen(f"{url}/metrics", timeout=5).read().decode()
    return sum(float(line.rsplit(" ", 1)[1]) for line in text.splitlines() if line.startswith(name))


def check_shared_prefixes(client):
    homes = {}
    for family in range(3):
        headers, answer = raw_completion(client, prompt=prompt(family, 0), max_tokens=3)
        assert answer.usage.completion_tokens == 3, answer
        homes[family] = headers["x-kvroute-worker"]
    time.sleep(0.5)  # the engines' events reach the gateway
    for family in range(3):
        for seed in range(1, 4):
            headers, _ = raw_completion(client, prompt=prompt(family, seed), max_tokens=2)
            assert headers["x-kvroute-worker"] == homes[family], (family, seed, headers)
            assert int(headers["x-kvroute-overlap-blocks"]) >= 4, headers
    # Streaming, chat: a conversation's next turn goes where its first turn is cached.
    turn = [{"role": "user", "content": prompt(7, 7)}]
    raw = client.chat.completions.with_raw_response.create(model=MODEL, messages=turn, max_tokens=4)
    first = raw.headers["x-kvroute-worker"]
    reply = raw.parse().choices[0].message.content
    time.sleep(0.5)
    turn += [{"role": "assistant", "content": reply}, {"role": "user", "content": "And then?"}]
    with client.chat.completions.with_streaming_response.create(
            model=MODEL, messages=turn, max_tokens=5, stream=True) as response:
        assert response.headers["x-kvroute-worker"] == first
        assert int(response.headers["x-kvroute-overlap-blocks"]) >= 4
        pieces = [c.choices[0].delta.content for c in response.parse() if c.choices and c.choices[0].delta.content]
    assert len(pieces) == 5, pieces
    stream = client.completions.create(model=MODEL, prompt=prompt(8, 8), max_tokens=3, stream=True)
    assert len([c for c in stream if c.choices and c.choices[0].text]) == 3
    print("ok 1: shared prefixes land on the worker holding them (chat, completions, streaming)")


def check_bad_input(client, url):
    def expect(error, call):
        try:
            call()
        except error as e:
            return e
        raise AssertionError(f"expected {error.__name__}")
    expect(openai.NotFoundError, lambda: client.completions.create(model="nope", prompt="x"))
    e = expect(openai.BadRequestError, lambda: client.completions.create(model=MODEL, prompt="word " * 5000))
    assert "maximum context length" in str(e), e
    expect(openai.BadRequestError, lambda: client.chat.completions.create(model=MODEL, messages=[], max_tokens=1))
    e = expect(openai.APIStatusError, lambda: client.completions.create(model=MODEL, prompt="a" * (40 << 20)))
    assert e.status_code == 413, e
    for body, status in [(b"{not json", 400), (b'{"model": "mock-model", "prompt": [1, 99999999]}', 400)]:
        request = urllib.request.Request(f"{url}/v1/completions", data=body, headers={"content-type": "application/json"})
        try:
            urllib.request.urlopen(request, timeout=10)
            raise AssertionError("accepted")
        except urllib.error.HTTPError as e:
            assert e.code == status and json.load(e)["error"]["code"] == status
    e = expect(openai.BadRequestError, lambda: client.completions.create(
        model=MODEL, prompt="x", extra_headers={"x-kvroute-temperature": "-3"}))
    assert metric(url, "kvroute_gateway_router_requests") == 0, "bad input left requests in flight"
    print("ok 2: every bad input gets its OpenAI error and leaves nothing in flight")


def check_kill_and_restart(client, kvroute, ports, tokenizer, victim):
    # A prompt the engine about to be killed (worker 1) holds.
    for family in range(400, 440):
        headers, _ = raw_completion(client, prompt=prompt(family, 0), max_tokens=1)
        if headers["x-kvroute-worker"] == "1":
            held = prompt(family, 0)
            break
    else:
        raise AssertionError("nothing went to worker 1")
    time.sleep(0.5)
    headers, _ = raw_completion(client, prompt=held, max_tokens=1)
    assert (headers["x-kvroute-worker"], int(headers["x-kvroute-overlap-blocks"]) > 0) == ("1", True), headers

    # Slow prefill: requests queue on both engines, not yet streaming, when one is killed.
    def ask(i):
        headers, _ = raw_completion(client, prompt=prompt(100 + i, i, words=120), max_tokens=2)
        return headers["x-kvroute-worker"], int(headers["x-kvroute-attempts"])
    with concurrent.futures.ThreadPoolExecutor(16) as pool:
        futures = [pool.submit(ask, i) for i in range(16)]
        time.sleep(0.4)
        victim.kill()
        victim.wait()
        results = [f.result(timeout=60) for f in futures]  # raises on any client-visible error
    retried = sum(1 for _, attempts in results if attempts > 1)
    assert retried > 0, f"no request was in flight on the killed engine: {results}"
    print(f"ok 3: a mocker killed mid-run cost no client-visible error ({retried} of 16 retried)")

    mocker(kvroute, *ports, tokenizer, prefill_tokens_per_s=2000)
    time.sleep(1.0)  # its health check passes again
    seen = set()
    for i in range(12):
        headers, _ = raw_completion(client, prompt=prompt(200 + i, i), max_tokens=1)
        seen.add(headers["x-kvroute-worker"])
    assert seen == {"0", "1"}, f"the restarted engine is not routed to: {seen}"
    print("ok 4a: the restarted mocker is routed to again")
    # Its first events told the gateway it restarted: what the old one held is forgotten.
    time.sleep(0.5)
    headers, _ = raw_completion(client, prompt=held, max_tokens=1)
    assert headers["x-kvroute-overlap-blocks"] == "0", headers
    print("ok 4b: the restarted mocker's index healed (its old blocks are forgotten)")


def check_replicas(kvroute, nats_server, workers, tokenizer):
    port = free_port()
    server = subprocess.Popen([nats_server, "-a", "127.0.0.1", "-p", str(port)],
                              stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    PROCESSES.append(server)
    time.sleep(0.5)
    nats = ["--nats", f"nats://127.0.0.1:{port}", "--namespace", "e2e"]
    _, url_b = gateway(kvroute, workers, tokenizer, *nats)
    _, url_c = gateway(kvroute, workers, tokenizer, *nats)
    client_b = openai.OpenAI(base_url=f"{url_b}/v1", api_key="none", max_retries=0)
    stream = client_b.completions.create(model=MODEL, prompt=prompt(300, 1), max_tokens=3000, stream=True)
    next(iter(stream))
    deadline = time.time() + 10
    while metric(url_c, "kvroute_gateway_router_requests") < 1:
        assert time.time() < deadline, "replica C never saw B's request"
        time.sleep(0.1)
    stream.close()
    while metric(url_c, "kvroute_gateway_router_requests") > 0:
        assert time.time() < deadline, "replica C never saw B's request end"
        time.sleep(0.1)
    print("ok 5: two gateway replicas on nats-server see each other's load")


def main():
    parser = argparse.ArgumentParser()
    parser.add_argument("--kvroute", required=True)
    parser.add_argument("--nats-server", required=True)
    parser.add_argument("--tokenizer", default=os.path.join(os.path.dirname(__file__), "..", "data", "tokenizer"))
    args = parser.parse_args()
    tokenizer = os.path.abspath(args.tokenizer)
    engines = [(free_port(), free_port(), free_port()) for _ in range(2)]
    processes = [mocker(args.kvroute, *ports, tokenizer, prefill_tokens_per_s=2000) for ports in engines]
    workers = [f"http://127.0.0.1:{h},zmq=tcp://127.0.0.1:{p},replay=tcp://127.0.0.1:{r}" for h, p, r in engines]
    _, url = gateway(args.kvroute, workers, tokenizer)
    client = openai.OpenAI(base_url=f"{url}/v1", api_key="none", max_retries=0, timeout=60)

    check_shared_prefixes(client)
    check_bad_input(client, url)
    check_kill_and_restart(client, args.kvroute, engines[1], tokenizer, processes[1])
    check_replicas(args.kvroute, args.nats_server, workers, tokenizer)


if __name__ == "__main__":
    try:
        main()
    finally:
        for process in PROCESSES:
            if process.poll() is None:
                process.send_signal(signal.SIGKILL)
                process.wait()
