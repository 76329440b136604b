"""KvRouter's recovery calls: run_recovery against a Python RecoverySource, worker_restarted
(with and without recovery), recovery_due after a failing source, and expire_now."""

import time

import pytest

import kvroute
from kvroute import BlockHasher, KvRouter, RouterEvent

BS = 4
TOKENS = list(range(16))


class Engine:
    """One worker's engine: publishes numbered events (from 1) and keeps them, as a source."""

    def __init__(self, worker: int) -> None:
        self.worker = worker
        self.events: list = []
        self.calls: list = []

    def publish(self, blocks, parent=None) -> RouterEvent:
        event = RouterEvent.stored(self.worker, len(self.events) + 1, blocks, parent=parent)
        self.events.append(event)
        return event

    def cache(self, tokens) -> list:
        """Caches the prompt's blocks one event each; returns the events."""
        local, seq = BlockHasher(BS).hash_request(tokens)
        parents = [None] + seq[:-1]
        return [self.publish([(l, s)], parent=p) for l, s, p in zip(local, seq, parents)]

    def events_since(self, worker_id, dp_rank, tier, from_id):
        self.calls.append(("events_since", worker_id, dp_rank, tier, from_id))
        if worker_id != self.worker:
            raise KeyError(worker_id)
        return [e for e in self.events if e.event_id >= from_id]

    def full_dump(self, worker_id, dp_rank, tier):
        self.calls.append(("full_dump", worker_id, dp_rank, tier))
        # Dicts in Dynamo's JSON shape are taken as well as RouterEvents.
        return [e.to_dict() for e in self.events], len(self.events)


def recovering_router() -> KvRouter:
    router = KvRouter(BS, recovery=True, seed=1)
    router.add_worker(1)
    router.add_worker(2)
    return router


def warm(router: KvRouter, engine: Engine) -> None:
    """A stream's first contact is a full restore."""
    router.apply_event(engine.publish([]))
    assert router.run_recovery(engine) == 1
    assert engine.calls[-1] == ("full_dump", engine.worker, 0, "device")


def test_a_lost_event_is_fetched_from_the_source() -> None:
    router, engine = recovering_router(), Engine(1)
    warm(router, engine)
    events = engine.cache(TOKENS)
    for i, event in enumerate(events):
        if i != 1:  # lost on the way
            router.apply_event(event)
    router.flush()
    assert router.route(TOKENS).overlap_blocks == 1, "only up to the gap"
    assert router.run_recovery(engine) == 1
    assert engine.calls[-1] == ("events_since", 1, 0, "device", events[1].event_id)
    router.flush()
    d = router.route(TOKENS)
    assert (d.worker_id, d.overlap_blocks) == (1, 4)
    assert router.run_recovery(engine) == 0 and router.recovery_due() is None


def test_a_restarted_worker_is_restored_from_its_new_run() -> None:
    router, engine = recovering_router(), Engine(1)
    warm(router, engine)
    for event in engine.cache(TOKENS):
        router.apply_event(event)
    router.flush()
    assert router.overlap_blocks(TOKENS, 1) == 4
    # Back empty under a new instance, it caches half the prompt.
    engine = Engine(1)
    router.worker_restarted(1)
    router.apply_event(engine.cache(TOKENS[:8])[0])
    assert router.run_recovery(engine) >= 1
    assert ("full_dump", 1, 0, "device") in engine.calls
    router.flush()
    assert router.overlap_blocks(TOKENS, 1) == 2


def test_without_recovery_a_restarted_worker_leaves_the_index() -> None:
    router = KvRouter(BS, seed=1)
    router.add_worker(1)
    local, seq = BlockHasher(BS).hash_request(TOKENS)
    router.apply_event(RouterEvent.stored(1, 1, list(zip(local, seq))))
    router.flush()
    assert router.overlap_blocks(TOKENS, 1) == 4
    router.worker_restarted(1)
    router.flush()
    assert router.overlap_blocks(TOKENS, 1) == 0
    # Recovery off: nothing to run, the source is never asked.
    engine = Engine(1)
    assert router.run_recovery(engine) == 0 and engine.calls == [] and router.recovery_due() is None


class Failing(Engine):
    def __init__(self, worker: int, answer) -> None:
        super().__init__(worker)
        self.answer = answer

    def full_dump(self, worker_id, dp_rank, tier):
        self.calls.append(("full_dump", worker_id, dp_rank, tier))
        if isinstance(self.answer, Exception):
            raise self.answer
        return self.answer


@pytest.mark.parametrize("answer", [RuntimeError("engine down"), KeyError(3), 42, ([{"worker_id": 1}], 1)])
def test_a_failing_source_is_retried_after_backoff(answer) -> None:
    router, engine = recovering_router(), Engine(1)
    source = Failing(1, answer)
    router.apply_event(engine.publish([]))
    router.run_recovery(source)  # raises nothing: the failure waits for a retry
    assert source.calls == [("full_dump", 1, 0, "device")]
    due = router.recovery_due()
    assert due is not None and 0 <= due <= 1.0
    time.sleep(due + 0.01)
    for e in engine.cache(TOKENS):
        router.apply_event(e)
    assert router.run_recovery(engine) >= 1
    router.flush()
    assert router.overlap_blocks(TOKENS, 1) == 4


def test_bad_arguments_raise() -> None:
    router = recovering_router()
    with pytest.raises(OverflowError):
        router.worker_restarted(-1)
    with pytest.raises(TypeError):
        router.run_recovery()  # type: ignore[call-arg]


def test_expire_now_drops_stale_requests() -> None:
    router = KvRouter(BS, expiry=0.05, seed=1)
    router.add_worker(1)
    router.route(TOKENS, request_id="a")
    assert router.expire_now() == []
    time.sleep(0.1)
    assert router.expire_now() == ["a"]
    assert router.expire_now() == []
    with pytest.raises(kvroute.UnknownRequestError):
        router.free("a")


def test_expire_now_drops_approximate_blocks_past_their_ttl() -> None:
    router = KvRouter(BS, use_kv_events=False, approx_ttl=0.05, seed=1)
    router.add_worker(1)
    router.route(TOKENS, request_id="a")
    router.free("a")
    router.flush()
    assert router.overlap_blocks(TOKENS, 1) == 4
    time.sleep(0.1)
    assert router.expire_now() == []
    router.flush()
    assert router.overlap_blocks(TOKENS, 1) == 0
