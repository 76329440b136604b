#!/usr/bin/env python3
"""A vLLM-format KV event publisher for kvroute's end-to-end test (tests/zmq_e2e.rs).

    python3 scripts/zmq_publisher.py --batches 40 --drop 7 --record /tmp/batches.jsonl [--wheel vllm.whl]

Binds a PUB socket and a ROUTER replay socket on free loopback ports and prints
`READY <pub address> <replay address>`. Until a `go` line arrives on stdin it re-publishes
batch 0 every 50 ms (so a subscriber that joined late still sees the stream start); then it
publishes batches 1..N-1, leaving the `--drop` ones off the PUB socket (they stay in the replay
buffer, as a message lost on the network would), prints `DONE`, and keeps answering replay
requests until stdin closes. Every batch's payload is written to `--record` as JSON lines
`{"seq", "payload" (hex)}` for the test to compute the expected index.

For the engine-restart case, `--pub-address`/`--replay-address` bind the addresses of an earlier
run, `--hash-base` gives this run its own blocks, and `--lost K` publishes batches 0..K-1 at once
(before any subscriber is back: they are lost, as a restarted vLLM's first batches are), waits
for a subscriber to connect, then publishes the rest without waiting for `go`. For the broken
replay endpoint, `--replay-mode silent` never answers and `--replay-mode framing` answers with
another framing; `--interval` spaces the live batches.

Framing and replay follow vLLM's `ZmqEventPublisher` (vllm/distributed/kv_events.py):
`[topic, seq (8 bytes big-endian), msgpack(EventBatch)]`; a replay request `[id, b"", start]`
is answered with `[id, b"", topic, seq, payload]` per buffered batch from `start` on and
`[id, b"", b"", -1, b""]`. Events alternate between vLLM 0.33's map encoding, the tuple
encoding of older vLLM and SGLang's short tuple. The event classes are vLLM 0.33.0's (copied
below; `--wheel` loads the real ones instead). Needs pyzmq and msgspec.
"""

import argparse
import json
import sys
import threading
import time
from pathlib import Path

import msgspec
import zmq

sys.path.insert(0, str(Path(__file__).resolve().parent))
import vllm_events  # noqa: E402

BLOCK = 4
END_SEQ = (-1).to_bytes(8, "big", signed=True)


def vllm_033_classes():
    """vLLM 0.33.0's event classes, as declared in vllm/distributed/kv_events.py."""

    class EventBatch(msgspec.Struct, array_like=True, omit_defaults=True, gc=False):
        ts: float
        events: list
        data_parallel_rank: int | None = None

    class KVCacheEvent(msgspec.Struct, omit_defaults=True, gc=False, tag=True):
        pass

    class BlockStored(KVCacheEvent):
        block_hashes: list[bytes | int]
        parent_block_hash: bytes | int | None
        token_ids: list[int]
        block_size: int
        lora_id: int | None
        medium: str | None
        lora_name: str | None
        extra_keys: list[tuple | None] | None = None
        group_idx: int | None = None
        kv_cache_spec_kind: str | None = None
        kv_cache_spec_sliding_window: int | None = None
        locality: str | None = None
        ownership: str | None = None
        session_id: str | None = None
        lookahead_token_ids: list[list[int]] | None = None

    class BlockRemoved(KVCacheEvent):
        block_hashes: list[bytes | int]
        medium: str | None
        group_idx: int | None = None
        locality: str | None = None
        ownership: str | None = None

    class AllBlocksCleared(KVCacheEvent):
        pass

    class KVEventBatch(EventBatch):
        events: list[BlockStored | BlockRemoved | AllBlocksCleared]

    return EventBatch, BlockStored, BlockRemoved, AllBlocksCleared


def plan(count, classes, base=1000):
    """Batch k stores block k of one long GPU chain (parent: block k-1); every third batch also
    stores a CPU side block, removed the batch after. The encoding rotates map / tuple / SGLang."""
    Batch, Stored, Removed, _ = classes
    encodings = [
        {"stored": Stored, "removed": Removed},
        {"stored": vllm_events.positional(Stored), "removed": vllm_events.positional(Removed)},
        {"stored": vllm_events.positional(Stored, 5), "removed": vllm_events.positional(Removed, 1)},
    ]
    batches = []
    for k in range(count):
        enc = encodings[k % 3]
        names = {f.name for f in msgspec.structs.fields(enc["stored"])}

        def stored(hashes, parent, tokens, medium):
            fields = dict(block_hashes=hashes, parent_block_hash=parent, token_ids=tokens,
                          block_size=BLOCK, lora_id=None, medium=medium, lora_name=None)
            return enc["stored"](**{n: v for n, v in fields.items() if n in names})

        first_token = 4 * (base - 1000 + k)
        events = [stored([base + k], None if k == 0 else base + k - 1,
                         list(range(first_token, first_token + 4)), "GPU")]
        if k % 3 == 0:
            # SGLang's short tuple has no medium: its side block lands on the device tier.
            events.append(stored([5000 + k], None, list(range(90_000 + 4 * k, 90_004 + 4 * k)), "CPU"))
        if k % 3 == 1 and k > 1:
            removed_names = {f.name for f in msgspec.structs.fields(enc["removed"])}
            fields = dict(block_hashes=[5000 + k - 1], medium="CPU")
            events.append(enc["removed"](**{n: v for n, v in fields.items() if n in removed_names}))
        batches.append(Batch(ts=time.time(), events=events, data_parallel_rank=0))
    return batches


def main():
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[1])
    parser.add_argument("--batches", type=int, default=40)
    parser.add_argument("--drop", type=int, action="append", default=[])
    parser.add_argument("--record", required=True)
    parser.add_argument("--topic", default="kv")
    parser.add_argument("--wheel", help="take the event classes from this vLLM wheel")
    parser.add_argument("--timeout", type=float, default=60.0, help="exit after this many seconds")
    parser.add_argument("--pub-address", default="tcp://127.0.0.1:*")
    parser.add_argument("--replay-address", default="tcp://127.0.0.1:*")
    parser.add_argument("--hash-base", type=int, default=1000)
    parser.add_argument("--lost", type=int, default=0,
                        help="publish this many first batches at once, then wait for a subscriber")
    parser.add_argument("--replay-mode", choices=["vllm", "silent", "framing"], default="vllm")
    parser.add_argument("--interval", type=float, default=0.0, help="seconds between live batches")
    args = parser.parse_args()

    if args.wheel:
        module, _ = vllm_events.load(args.wheel)
        classes = (module.KVEventBatch, module.BlockStored, module.BlockRemoved, module.AllBlocksCleared)
    else:
        classes = vllm_033_classes()
    encoder = msgspec.msgpack.Encoder()
    payloads = [encoder.encode(b) for b in plan(args.batches, classes, args.hash_base)]
    with open(args.record, "w") as record:
        for seq, payload in enumerate(payloads):
            record.write(json.dumps({"seq": seq, "payload": payload.hex()}) + "\n")

    ctx = zmq.Context.instance()
    # XPUB (a PUB that hears subscriptions) tells when a subscriber is back.
    pub = ctx.socket(zmq.XPUB if args.lost else zmq.PUB)
    pub.bind(args.pub_address)
    replay = ctx.socket(zmq.ROUTER)
    replay.bind(args.replay_address)
    topic = args.topic.encode()
    buffer = []  # (seq, payload): everything published, as vLLM's replay deque

    go = threading.Event()
    closed = threading.Event()

    def read_stdin():
        for line in sys.stdin:
            if line.strip() == "go":
                go.set()
        closed.set()

    threading.Thread(target=read_stdin, daemon=True).start()
    print("READY", pub.getsockopt_string(zmq.LAST_ENDPOINT),
          replay.getsockopt_string(zmq.LAST_ENDPOINT), flush=True)

    def service_replay(wait_ms):
        if not replay.poll(wait_ms):
            return
        frames = replay.recv_multipart()
        if len(frames) != 3:
            return
        client, _, start = frames
        if args.replay_mode == "silent":
            return
        if args.replay_mode == "framing":
            replay.send_multipart((client, b"", b"not vLLM's replay framing"))
            return
        start = int.from_bytes(start, "big")
        for seq, payload in buffer:
            if seq >= start:
                replay.send_multipart((client, b"", topic, seq.to_bytes(8, "big"), payload))
        replay.send_multipart((client, b"", b"", END_SEQ, b""))

    def publish(seq):
        if not any(s == seq for s, _ in buffer):
            buffer.append((seq, payloads[seq]))
        if seq not in args.drop:
            pub.send_multipart((topic, seq.to_bytes(8, "big"), payloads[seq]))

    deadline = time.time() + args.timeout
    first = 1
    if args.lost:
        for seq in range(args.lost):
            publish(seq)
        first = args.lost
        while not pub.poll(50) and time.time() < deadline:
            service_replay(0)
        if pub.poll(0):
            pub.recv()  # the subscription
    while not args.lost and not go.is_set() and not closed.is_set() and time.time() < deadline:
        publish(0)
        service_replay(50)
    for seq in range(first, len(payloads)):
        publish(seq)
        service_replay(0)
        if args.interval:
            time.sleep(args.interval)
    print("DONE", flush=True)
    while not closed.is_set() and time.time() < deadline:
        service_replay(50)
    pub.close(linger=0)
    replay.close(linger=0)


if __name__ == "__main__":
    main()
