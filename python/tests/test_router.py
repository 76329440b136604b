"""KvRouter: every method and every error, through the Python bindings."""

import array
import threading

import pytest

import kvroute
from kvroute import BlockHasher, KvRouter, RouterEvent

BS = 4


def chain_event(hasher: BlockHasher, worker: int, tokens: list, event_id: int = 1) -> RouterEvent:
    local, seq = hasher.hash_request(tokens)
    # Engine hashes: any ids the engine picks; here offset sequence hashes.
    return RouterEvent.stored(worker, event_id, [(l, s ^ worker) for l, s in zip(local, seq)])


@pytest.fixture
def router() -> KvRouter:
    r = KvRouter(BS, seed=7)
    r.add_worker(1)
    r.add_worker(2)
    return r


def test_defaults_and_workers(router: KvRouter) -> None:
    assert router.block_size == BS
    assert sorted(router.workers()) == [(1, 0, "both"), (2, 0, "both")]
    assert router.remove_worker(2) == []
    assert router.workers() == [(1, 0, "both")]


def test_route_follows_the_cache(router: KvRouter) -> None:
    tokens = list(range(32))
    router.apply_event(chain_event(BlockHasher(BS), 2, tokens))
    router.flush()
    for form in (tokens, array.array("I", tokens), array.array("I", tokens).tobytes(), tuple(tokens)):
        d = router.route(form)
        assert d.worker_id == 2
        assert d.worker == (2, 0)
        assert d.overlap_blocks == 8
        assert d.request_blocks == 8
    assert router.overlap_blocks(tokens, 2) == 8
    assert router.overlap_blocks(tokens, 1) == 0


def test_route_with_numpy(router: KvRouter) -> None:
    np = pytest.importorskip("numpy")
    tokens = np.arange(32, dtype=np.uint32)
    router.apply_event(chain_event(BlockHasher(BS), 1, list(range(32))))
    router.flush()
    assert router.route(tokens).worker_id == 1
    with pytest.raises(TypeError):
        router.route(np.arange(32, dtype=np.int64))


def test_request_lifecycle(router: KvRouter) -> None:
    tokens = list(range(16))
    d = router.route(tokens, request_id="a")
    loads = {l["worker_id"]: l for l in router.potential_loads(tokens)}
    assert loads[d.worker_id]["active_requests"] == 1
    router.mark_prefill_completed("a")
    router.add_output_block("a")
    router.free("a")
    loads = {l["worker_id"]: l for l in router.potential_loads(tokens)}
    assert loads[d.worker_id]["active_requests"] == 0
    assert router.add_request("b", tokens, 1) == []
    assert {l["worker_id"]: l["active_requests"] for l in router.potential_loads(tokens)}[1] == 1
    router.free("b")
    stats = router.stats()
    assert stats["workers"] == 2 and stats["decisions"] >= 1


def test_dict_events_round_trip(router: KvRouter) -> None:
    event = chain_event(BlockHasher(BS), 1, list(range(8)), event_id=5)
    d = event.to_dict()
    assert d["worker_id"] == 1 and d["event"]["event_id"] == 5 and "stored" in d["event"]["data"]
    assert RouterEvent.from_dict(d) == event
    router.apply_event(d)
    router.flush()
    assert router.route(list(range(8))).worker_id == 1
    removed = RouterEvent.removed(1, 6, [b[1] for b in event.blocks])
    assert removed.kind == "removed"
    router.apply_event(removed)
    router.apply_event(RouterEvent.cleared(1, 7, tier="host_pinned"))
    router.flush()
    assert router.overlap_blocks(list(range(8)), 1) == 0


def test_snapshot_round_trip(router: KvRouter, tmp_path) -> None:
    tokens = list(range(24))
    router.apply_event(chain_event(BlockHasher(BS), 2, tokens))
    path = tmp_path / "snap.bin"
    router.save_snapshot(path)
    other = KvRouter(BS)
    other.add_worker(1)
    other.add_worker(2)
    other.restore_snapshot(str(path))
    assert other.overlap_blocks(tokens, 2) == 6
    with pytest.raises(kvroute.SnapshotError):
        other.restore_snapshot(path)  # not empty any more
    bad = tmp_path / "bad.bin"
    bad.write_bytes(b"not a snapshot at all")
    with pytest.raises(kvroute.SnapshotError):
        KvRouter(BS).restore_snapshot(bad)


def test_errors(router: KvRouter) -> None:
    with pytest.raises(kvroute.ConfigError, match="block"):
        KvRouter(0)
    with pytest.raises(kvroute.ConfigError):
        KvRouter(BS, temperature=-1.0)
    with pytest.raises(kvroute.ConfigError):
        KvRouter(BS, expiry=-1.0)
    with pytest.raises(kvroute.ConfigError, match="approximate.lag"):
        KvRouter(BS, use_kv_events=False, approx_ttl=1.0, approx_lag=1.0)
    # No lag: decisions are indexed on the calling thread.
    no_lag = KvRouter(BS, use_kv_events=False, approx_lag=0.0)
    no_lag.add_worker(1, 0)
    no_lag.route(list(range(3 * BS)))
    no_lag.flush()
    assert no_lag.route(list(range(3 * BS))).overlap_blocks == 3
    with pytest.raises(kvroute.RouteError) as e:
        router.route([])
    assert e.value.kind == "empty_request"
    with pytest.raises(kvroute.RouteError) as e:
        KvRouter(BS).route([1, 2, 3, 4])
    assert e.value.kind == "no_workers"
    with pytest.raises(kvroute.RouteError) as e:
        router.route([1, 2, 3, 4], pinned_worker=(9, 0))
    assert e.value.kind == "unknown_pinned_worker"
    router.route([1, 2, 3, 4], request_id="dup")
    with pytest.raises(kvroute.RouteError) as e:
        router.route([1, 2, 3, 4], request_id="dup")
    assert e.value.kind == "sequences"
    with pytest.raises(kvroute.RouteError) as e:
        router.route([1, 2, 3, 4], update_states=True)
    assert e.value.kind == "missing_request_id"
    with pytest.raises(kvroute.UnknownRequestError):
        router.free("nope")
    with pytest.raises(kvroute.UnknownRequestError):
        router.add_output_block("nope")
    with pytest.raises(kvroute.UnknownRequestError):
        router.mark_prefill_completed("nope")
    with pytest.raises(kvroute.EventError):
        router.apply_event({"worker_id": 1})
    with pytest.raises(kvroute.EventError):
        router.apply_event(42)
    with pytest.raises(kvroute.EventError):
        RouterEvent.cleared(1, 1, tier="moon")
    with pytest.raises(ValueError):
        router.route(b"\x01\x02\x03")
    with pytest.raises(OverflowError):
        router.route([1, -1])
    with pytest.raises(kvroute.ConfigError):
        router.add_worker(3, role="chef")
    for cls in (kvroute.ConfigError, kvroute.RouteError, kvroute.UnknownRequestError, kvroute.EventError,
                kvroute.IndexDownError, kvroute.SnapshotError, kvroute.WireError, kvroute.ZmqError,
                kvroute.NatsError):
        assert issubclass(cls, kvroute.KvrouteError)
        assert cls.__name__ == cls.__qualname__ and getattr(kvroute, cls.__name__) is cls
        assert cls.__module__ == "kvroute"


@pytest.mark.parametrize("length", [128, 1024])  # route keeps the GIL, then releases it
def test_threads_route_while_events_apply(length: int) -> None:
    router = KvRouter(BS, seed=1)
    for w in range(8):
        router.add_worker(w)
    hasher = BlockHasher(BS)
    prompts = [array.array("I", range(p * 10_000, p * 10_000 + length)) for p in range(16)]
    errors: list = []
    stop = threading.Event()

    def writer() -> None:
        try:
            for i, p in enumerate(prompts * 4):
                router.apply_event(chain_event(hasher, i % 8, list(p), event_id=i + 1))
        except Exception as e:  # pragma: no cover - reported below
            errors.append(e)
        finally:
            stop.set()

    def reader() -> None:
        try:
            n = 0
            while not stop.is_set() or n < 200:
                d = router.route(prompts[n % 16])
                assert 0 <= d.worker_id < 8 and d.request_blocks == length // BS
                n += 1
        except Exception as e:  # pragma: no cover
            errors.append(e)

    threads = [threading.Thread(target=writer)] + [threading.Thread(target=reader) for _ in range(3)]
    for t in threads:
        t.start()
    for t in threads:
        t.join(timeout=60)
    assert not errors
    router.flush()
    # Every prompt ends fully cached somewhere.
    assert all(router.route(p).overlap_blocks == length // BS for p in prompts)


def test_block_hasher() -> None:
    h = BlockHasher(BS)
    local, seq = h.hash_request(list(range(10)))
    assert len(local) == 2 and len(seq) == 2 and seq[0] == local[0]
    assert h.local_hashes(array.array("I", range(10))) == local
    assert h.sequence_hashes(list(range(10))) == seq
    assert BlockHasher(BS, lora_name="x").local_hashes(list(range(10))) != local
    with pytest.raises(kvroute.ConfigError):
        BlockHasher(0)


def test_route_options(router: KvRouter) -> None:
    tokens = list(range(32))
    router.apply_event(chain_event(BlockHasher(BS), 2, tokens))
    router.flush()
    # Only worker 1 allowed: chosen despite worker 2's cache.
    assert router.route(tokens, allowed_workers=[1]).worker_id == 1
    assert router.route(tokens, pinned_worker=1).worker_id == 1
    assert router.route(tokens, pinned_worker=(1, 0)).worker_id == 1
    # A LoRA salts the hashes: worker 2's cache does not match.
    assert router.route(tokens, lora_name="adapter").overlap_blocks == 0
    assert router.route(tokens, cache_namespace="tenant").overlap_blocks == 0
    # Ignoring the cache entirely is an override.
    assert router.route(tokens, overlap_score_weight=0.0, temperature=0.0).request_blocks == 8
    first = router.route(tokens, session_id="s", request_id="s1")
    again = router.route(tokens, session_id="s", request_id="s2")
    assert again.worker_id == first.worker_id and again.session_hit
    assert router.stats()["session_hits"] >= 1


def test_remove_worker_returns_its_requests(router: KvRouter) -> None:
    d = router.route(list(range(16)), request_id="r", pinned_worker=2)
    assert d.worker_id == 2
    assert router.remove_worker(2) == ["r"]
    with pytest.raises(kvroute.UnknownRequestError):
        router.free("r")


def test_disaggregated_roles() -> None:
    r = KvRouter(BS)
    r.add_worker(1, role="prefill")
    r.add_worker(2, role="decode")
    d = r.route(list(range(16)))
    assert d.worker_id == 1 and d.decode_worker == (2, 0)
    assert r.stats()["disaggregated"]


def test_stats_index_counts_events(router: KvRouter) -> None:
    router.apply_event(chain_event(BlockHasher(BS), 1, list(range(16))))
    router.flush()
    device = router.stats()["index"]["device"]
    assert device["events"] == 1 and device["block_ops"] == 4 and device["errors"] == 0
    # An unknown parent is counted by the index, not raised (events apply asynchronously).
    router.apply_event(RouterEvent.stored(1, 2, [(1, 2)], parent=999))
    router.flush()
    assert router.stats()["index"]["device"]["errors"] == 1


def test_token_buffers_read_as_their_lists(router: KvRouter) -> None:
    tokens = list(range(64))
    router.apply_event(chain_event(BlockHasher(BS), 2, tokens[::2]))
    router.flush()
    want = router.route(tokens[::2]).overlap_blocks
    assert want == 8
    assert router.route(memoryview(array.array("I", tokens[::2]))).overlap_blocks == want
    assert router.route(bytearray(array.array("I", tokens[::2]).tobytes())).overlap_blocks == want
    with pytest.raises(TypeError):
        router.route(array.array("i", tokens))
    with pytest.raises(TypeError):
        router.route(array.array("Q", tokens))
    np = pytest.importorskip("numpy")
    strided = np.arange(64, dtype=np.uint32)[::2]  # not contiguous: read through tobytes()
    assert router.route(strided).overlap_blocks == want
    with pytest.raises(TypeError):
        router.route(np.arange(64, dtype=np.dtype(">u4")))  # big-endian: refused, not misread


@pytest.mark.parametrize("length", [40, 1023, 1024, 3000])
def test_every_token_form_routes_alike_on_both_sides_of_the_gil_threshold(length: int) -> None:
    # Under 1024 tokens route keeps the GIL and reads buffers in place; from 1024 on it hashes
    # a mutable buffer's blocks first (bytes, lists: not) and releases the GIL.
    r = KvRouter(BS, seed=3)
    for w in (1, 2, 3):
        r.add_worker(w)
    tokens = [(7 * i + 11) % 50_000 for i in range(length)]
    r.apply_event(chain_event(BlockHasher(BS), 2, tokens[: length // 2]))
    r.apply_event(chain_event(BlockHasher(BS), 3, tokens[: length // 3]))
    r.flush()
    want = r.route(tokens, temperature=0.0)
    assert (want.worker_id, want.overlap_blocks, want.request_blocks) == (2, length // 2 // BS, length // BS)
    raw = array.array("I", tokens).tobytes()
    # An 'I' buffer off 4-byte alignment: read through a copy.
    unaligned = memoryview(bytearray(b"\0" + raw))[1:].cast("I")
    forms = [tuple(tokens), array.array("I", tokens), raw, memoryview(array.array("I", tokens)), unaligned,
             iter(tokens)]
    for form in forms:
        d = r.route(form, temperature=0.0)
        assert (d.worker_id, d.overlap_blocks, d.request_blocks) == (2, want.overlap_blocks, want.request_blocks)
    with pytest.raises(ValueError):
        r.route(raw[:-1])
    # Recorded requests go through the same path.
    d = r.route(array.array("I", tokens), request_id="x")
    assert d.worker_id == 2
    r.free("x")
    # So do salted prompts: a LoRA's blocks are not the base model's.
    salted = BlockHasher(BS, lora_name="ada")
    local, seq = salted.hash_request(tokens)
    r.apply_event(RouterEvent.stored(1, 9, [(l, s ^ 1) for l, s in zip(local, seq)]))
    r.flush()
    for form in (tokens, array.array("I", tokens), raw):
        d = r.route(form, lora_name="ada", temperature=0.0)
        assert (d.worker_id, d.overlap_blocks) == (1, length // BS)
