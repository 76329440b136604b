"""ZmqSubscriber against the repository's Python ZMQ publisher (scripts/zmq_publisher.py,
vLLM's framing and replay protocol): a dropped batch heals through the replay socket."""

import json
import subprocess
import sys
import time

import pytest

from kvroute import KvRouter, VllmDecoder, ZmqSubscriber
from conftest import REPO

pytest.importorskip("zmq")
pytest.importorskip("msgspec")

BATCHES = 40
DROPPED = 7
WORKER = 7


def wait_until(what, cond, timeout=30.0):
    deadline = time.monotonic() + timeout
    while not cond():
        if time.monotonic() > deadline:
            raise AssertionError(f"timed out waiting for {what}")
        time.sleep(0.02)


def test_subscriber_heals_a_dropped_batch(tmp_path):
    record = tmp_path / "batches.jsonl"
    publisher = subprocess.Popen(
        [sys.executable, str(REPO / "scripts" / "zmq_publisher.py"), "--batches", str(BATCHES),
         "--drop", str(DROPPED), "--record", str(record)],
        stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True)
    try:
        words = publisher.stdout.readline().split()
        assert words and words[0] == "READY", words
        router = KvRouter(16, seed=1)
        router.add_worker(WORKER)
        endpoint = {"worker_id": WORKER, "publisher": words[1], "replay": words[2], "topic": "kv"}
        with ZmqSubscriber(router, [endpoint]) as sub:
            assert sub.running
            wait_until("the first batch", lambda: sub.stats()[0]["events"] >= 1)
            publisher.stdin.write("go\n")
            publisher.stdin.flush()
            assert publisher.stdout.readline().strip() == "DONE"
            wait_until("the last batch", lambda: sub.stats()[0]["last_seq"] == BATCHES - 1
                       and not sub.stats()[0]["recovering"])
            wait_until("the gap to heal", lambda: sub.stats()[0]["gaps_healed"] >= 1)
            stats = sub.stats()[0]
            assert stats["gaps"] >= 1 and stats["decode_errors"] == 0
        assert not sub.running
        sub.stop()  # a second stop does nothing

        # The same batches, every one of them, decoded and applied directly.
        reference = KvRouter(16, seed=1)
        decoder = VllmDecoder(WORKER)
        for line in record.read_text().splitlines():
            batch = json.loads(line)
            for event in decoder.decode_batch(batch["seq"], bytes.fromhex(batch["payload"])).events:
                reference.apply_event(event)
        reference.flush()
        router.flush()
        got = {t: s["live_entries"] for t, s in router.stats()["index"].items()}
        want = {t: s["live_entries"] for t, s in reference.stats()["index"].items()}
        assert sum(want.values()) > 0
        assert got == want
    finally:
        publisher.stdin.close()
        publisher.wait(timeout=10)


def test_subscriber_rejects_a_bad_endpoint():
    import kvroute

    router = KvRouter(16)
    with pytest.raises(kvroute.ZmqError):
        ZmqSubscriber(router, [(1, "not an address")])
    with pytest.raises(kvroute.ZmqError):
        ZmqSubscriber(router, [{"worker_id": 1}])
