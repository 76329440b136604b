#!/usr/bin/env python3
"""Golden vLLM KV event payloads, made by vLLM's own event classes.

    python3 scripts/make_vllm_golden.py [--wheel vllm-X.whl | --version X] [--out tests/data/vllm]

Without `--wheel` it runs `pip download vllm --no-deps` (the newest release; `--version` pins one)
into a temporary directory, loads `vllm/distributed/kv_events.py` from the wheel (see
`vllm_events.py`: msgspec only, other imports stubbed), and writes for every case a ZMQ message's
frames, `NAME.topic`, `NAME.seq` (8 bytes big-endian) and `NAME.msgpack` (the `EventBatch`),
plus `manifest.json`: what each batch must decode to, written from the same Python objects
(hashes already as the integers vLLM's int mode publishes). Needs `msgspec` (pip).

Cases: vLLM's own map-tagged events (this version's encoding: int hashes, sha256 digests,
every optional field set, LoRA, every medium, events kvroute skips, signed hashes), the same
classes re-declared as tagged tuples (`array_like=True`, as vLLM up to 0.32 sent them), cut
short (older vLLM ending at `medium`), and SGLang's shape (`BlockStored` ending at `lora_id`).
"""

import argparse
import hashlib
import json
import sys
import tempfile
from pathlib import Path

import msgspec

sys.path.insert(0, str(Path(__file__).resolve().parent))
import vllm_events  # noqa: E402

BLOCK = 4


def tokens(start, blocks, size=BLOCK):
    return list(range(start, start + blocks * size))


def digest(text):
    return hashlib.sha256(text.encode()).digest()


def expected_hash(h):
    return vllm_events.int_hash(h) if isinstance(h, bytes) else h & ((1 << 64) - 1)


def describe(event, kind):
    """What kvroute must decode `event` to (None: skipped)."""
    get = lambda name, default=None: getattr(event, name, default)  # noqa: E731
    if get("locality") not in (None, "LOCAL") or get("ownership") or (get("group_idx") or 0) > 0:
        return None
    if kind == "AllBlocksCleared":
        return {"type": kind, "medium": None}
    out = {
        "type": kind,
        "block_hashes": [expected_hash(h) for h in event.block_hashes],
        "medium": get("medium"),
    }
    if kind == "BlockStored":
        parent = event.parent_block_hash
        out |= {
            "parent": None if parent is None else expected_hash(parent),
            "token_ids": list(event.token_ids),
            "block_size": event.block_size,
            "lora_name": get("lora_name"),
        }
    return out


def main():
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[1])
    parser.add_argument("--wheel", help="a downloaded vllm wheel (default: pip download)")
    parser.add_argument("--version", help="the vLLM release to download")
    parser.add_argument("--out", default=str(Path(__file__).resolve().parent.parent / "tests/data/vllm"))
    args = parser.parse_args()

    with tempfile.TemporaryDirectory() as tmp:
        wheel = args.wheel or vllm_events.download_wheel(tmp, args.version)
        m, version = vllm_events.load(wheel)

    Stored, Removed, Cleared, Batch = m.BlockStored, m.BlockRemoved, m.AllBlocksCleared, m.KVEventBatch

    def stored(hashes, parent, toks, **kw):
        base = dict(lora_id=None, medium="GPU", lora_name=None)
        base.update(kw)
        return dict(block_hashes=hashes, parent_block_hash=parent, token_ids=toks, block_size=BLOCK, **base)

    full_stored = stored(
        [901, 902], 900, tokens(100, 2), lora_id=3, lora_name="my-lora", medium="GPU",
        extra_keys=[("my-lora",), ("my-lora", ("mm-1", 0))], group_idx=0,
        kv_cache_spec_kind="full_attention", kv_cache_spec_sliding_window=None,
        locality="LOCAL", session_id="session-1",
        lookahead_token_ids=[[108], [109]],
    )
    # (kind, fields) per event: the same cases for every encoding.
    cases = {
        "map_int_hashes": (0, 1, [
            ("BlockStored", stored([11, 12, 13], None, tokens(0, 3))),
            ("BlockStored", stored([14], 13, tokens(12, 1))),
            ("BlockRemoved", dict(block_hashes=[14], medium="GPU")),
        ]),
        "map_sha256_hashes": (0, None, [
            ("BlockStored", stored([digest("a"), digest("b")], None, tokens(50, 2))),
            ("BlockStored", stored([digest("c")], digest("b"), tokens(58, 1))),
            ("BlockRemoved", dict(block_hashes=[digest("c")], medium=None)),
        ]),
        "map_all_fields": (0, 3, [
            ("BlockStored", full_stored),
            ("BlockRemoved", dict(block_hashes=[902], medium="GPU", group_idx=0, locality="LOCAL")),
        ]),
        "map_media": (0, 0, [
            ("BlockStored", stored([21], None, tokens(200, 1), medium="CPU")),
            ("BlockStored", stored([22], None, tokens(204, 1), medium="CPU_PINNED")),
            ("BlockStored", stored([23], None, tokens(208, 1), medium="STORAGE")),
            ("BlockStored", stored([24], None, tokens(212, 1), medium="DISK")),
            ("BlockStored", stored([25], None, tokens(216, 1), medium="OBJ")),
            ("BlockStored", stored([26], None, tokens(220, 1), medium=None)),
            ("BlockRemoved", dict(block_hashes=[21], medium="CPU")),
            ("AllBlocksCleared", {}),
        ]),
        "map_skipped": (0, 0, [
            ("BlockStored", stored([31], None, tokens(300, 1), locality="REMOTE")),
            ("BlockStored", stored([32], None, tokens(304, 1), group_idx=1)),
            ("BlockStored", stored([33], None, tokens(308, 1), ownership="kvcr")),
            ("BlockStored", stored([34], None, tokens(312, 1))),
        ]),
        "map_signed_hashes": (0, 2, [
            ("BlockStored", stored([-1, -(1 << 63), (1 << 64) - 2], None, tokens(400, 3))),
            ("BlockRemoved", dict(block_hashes=[-1], medium="GPU")),
        ]),
    }
    # Positional encodings of the int-hash and all-fields cases.
    positional = {}
    for name, upto_stored, upto_removed in [
        ("tuple_full", None, None),  # every field, as vLLM <= 0.32 with array_like=True
        ("tuple_short", 6, 2),  # ends at `medium` (older vLLM)
        ("tuple_sglang", 5, 1),  # SGLang: BlockStored ends at lora_id, BlockRemoved at hashes
    ]:
        positional[name] = {
            "BlockStored": vllm_events.positional(Stored, upto_stored),
            "BlockRemoved": vllm_events.positional(Removed, upto_removed),
            "AllBlocksCleared": vllm_events.positional(Cleared),
        }

    out = Path(args.out)
    out.mkdir(parents=True, exist_ok=True)
    for stale in out.glob("*.msgpack"):
        stale.unlink()
    manifest = {"vllm_version": version, "block_size": BLOCK, "batches": []}
    encoder = msgspec.msgpack.Encoder()
    seq = 0

    def emit(name, ts_offset, dp_rank, events):
        nonlocal seq
        batch = Batch(ts=1_700_000_000.0 + ts_offset, events=[e for e, _ in events], data_parallel_rank=dp_rank)
        (out / f"{name}.msgpack").write_bytes(encoder.encode(batch))
        (out / f"{name}.seq").write_bytes(seq.to_bytes(8, "big"))
        (out / f"{name}.topic").write_bytes(b"kv-events")
        manifest["batches"].append({
            "name": name, "seq": seq, "ts": batch.ts, "dp_rank": dp_rank,
            "events": [d for _, d in events if d is not None],
            "skipped": sum(d is None for _, d in events),
        })
        seq += 1

    classes = {"BlockStored": Stored, "BlockRemoved": Removed, "AllBlocksCleared": Cleared}
    for name, (ts, dp_rank, events) in cases.items():
        built = [(classes[k](**f), k) for k, f in events]
        emit(name, ts + seq, dp_rank, [(e, describe(e, k)) for e, k in built])
    for name, kinds in positional.items():
        for case in ["map_int_hashes", "map_all_fields", "map_media"]:
            _, dp_rank, events = cases[case]
            built = []
            for kind, fields in events:
                cls = kinds[kind]
                names = {f.name for f in msgspec.structs.fields(cls)}
                kept = {k: v for k, v in fields.items() if k in names}
                built.append((cls(**kept), kind))
            label = f"{name}_{case.removeprefix('map_')}"
            emit(label, seq, dp_rank, [(e, describe(e, k)) for e, k in built])

    (out / "manifest.json").write_text(json.dumps(manifest, indent=1) + "\n")
    print(f"vLLM {version}: {len(manifest['batches'])} batches in {out}")


if __name__ == "__main__":
    main()
