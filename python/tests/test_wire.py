"""VllmDecoder on the golden vLLM payloads the Rust tests use (tests/data/vllm/), and the
events' round trip through Dynamo's JSON shape into a router."""

import json

import pytest

import kvroute
from kvroute import BlockHasher, KvRouter, RouterEvent, VllmDecoder
from conftest import REPO

DATA = REPO / "tests" / "data" / "vllm"
WORKER = 42


def tier(medium):
    if medium in (None, "GPU"):
        return "device"
    if medium in ("CPU", "CPU_PINNED"):
        return "host_pinned"
    if medium in ("STORAGE", "DISK"):
        return "disk"
    return "external"


def expected(event, seq, dp_rank):
    kind = event["type"]
    t = tier(event.get("medium"))
    if kind == "BlockStored":
        hasher = BlockHasher(event["block_size"], lora_name=event.get("lora_name") or None)
        local = hasher.local_hashes(event["token_ids"])
        engine = event["block_hashes"]
        assert len(local) == len(engine)
        return RouterEvent.stored(WORKER, seq, list(zip(local, engine)), parent=event["parent"],
                                  dp_rank=dp_rank, tier=t)
    if kind == "BlockRemoved":
        return RouterEvent.removed(WORKER, seq, event["block_hashes"], dp_rank=dp_rank, tier=t)
    assert kind == "AllBlocksCleared"
    return RouterEvent.cleared(WORKER, seq, dp_rank=dp_rank, tier=t)


def golden():
    manifest = json.loads((DATA / "manifest.json").read_text())
    return manifest["batches"]


def test_golden_batches_decode_to_what_vllm_was_given():
    batches = golden()
    assert len(batches) >= 15
    decoder = VllmDecoder(WORKER)
    assert decoder.worker_id == WORKER
    events = 0
    for batch in batches:
        name = batch["name"]
        frames = [(DATA / f"{name}.{ext}").read_bytes() for ext in ("topic", "seq", "msgpack")]
        decoded = decoder.decode_message(frames)
        assert decoded.seq == batch["seq"], name
        assert decoded.ts == batch["ts"], name
        assert decoded.dp_rank == batch["dp_rank"], name
        assert decoded.skipped == batch["skipped"], name
        want = [expected(e, batch["seq"], batch["dp_rank"] or 0) for e in batch["events"]]
        assert decoded.events == want, name
        # decode_batch on the payload alone agrees.
        again = decoder.decode_batch(batch["seq"], frames[2])
        assert again.events == decoded.events, name
        # Every event survives Dynamo's JSON shape, as a dict and as text.
        for event in decoded.events:
            assert RouterEvent.from_dict(event.to_dict()) == event
            assert RouterEvent.from_json(event.to_json()) == event
        events += len(want)
    assert events >= 30


def test_golden_events_into_a_router():
    router = KvRouter(4, seed=3)
    router.add_worker(WORKER, 1)
    batch = golden()[0]  # map_int_hashes: stores 0..15 in two events, removes the last block
    assert batch["name"] == "map_int_hashes"
    frames = [(DATA / f"{batch['name']}.{ext}").read_bytes() for ext in ("topic", "seq", "msgpack")]
    for event in VllmDecoder(WORKER).decode_message(frames).events:
        router.apply_event(event.to_dict())
    router.flush()
    assert router.overlap_blocks(list(range(16)), WORKER, 1) == 3
    assert router.route(list(range(16))).worker == (WORKER, 1)


def test_decoder_errors():
    decoder = VllmDecoder(1)
    with pytest.raises(kvroute.WireError):
        decoder.decode_batch(0, b"\xc1 not msgpack")
    with pytest.raises(kvroute.WireError, match="frame"):
        decoder.decode_message([b"topic", b"\x00" * 8])
    with pytest.raises(kvroute.WireError):
        decoder.decode_message([b"topic", b"\x00" * 3, b""])
    with pytest.raises(kvroute.EventError):
        RouterEvent.from_json("{}")
