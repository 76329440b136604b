"""Type stubs for kvroute (the Rust extension ``kvroute._kvroute``)."""

import array
import os
from types import TracebackType
from typing import Any, Dict, Iterable, List, Literal, Optional, Protocol, Sequence, Tuple, Union

__version__: str

Tokens = Union[bytes, bytearray, "array.array[int]", Sequence[int], Any]
"""Token ids: a uint32 buffer (bytes, array.array('I'), numpy uint32) or a list of ints."""

Tier = Literal["device", "host_pinned", "disk", "external"]
Role = Literal["both", "prefill", "decode"]

class KvrouteError(Exception):
    """Base of every error kvroute raises."""

class ConfigError(KvrouteError): ...
class RouteError(KvrouteError):
    kind: str
class UnknownRequestError(KvrouteError): ...
class EventError(KvrouteError): ...
class IndexDownError(KvrouteError): ...
class SnapshotError(KvrouteError): ...
class WireError(KvrouteError): ...
class ZmqError(KvrouteError): ...
class NatsError(KvrouteError): ...

class RouterEvent:
    """One KV event of one worker's engine (immutable)."""

    @staticmethod
    def stored(
        worker_id: int,
        event_id: int,
        blocks: Sequence[Tuple[int, int]],
        *,
        parent: Optional[int] = None,
        dp_rank: int = 0,
        tier: Tier = "device",
    ) -> "RouterEvent": ...
    @staticmethod
    def removed(
        worker_id: int, event_id: int, blocks: Sequence[int], *, dp_rank: int = 0, tier: Tier = "device"
    ) -> "RouterEvent": ...
    @staticmethod
    def cleared(worker_id: int, event_id: int, *, dp_rank: int = 0, tier: Tier = "device") -> "RouterEvent": ...
    @staticmethod
    def from_dict(d: Dict[str, Any]) -> "RouterEvent": ...
    @staticmethod
    def from_json(json: Union[str, bytes]) -> "RouterEvent": ...
    def to_dict(self) -> Dict[str, Any]: ...
    def to_json(self) -> str: ...
    @property
    def worker_id(self) -> int: ...
    @property
    def dp_rank(self) -> int: ...
    @property
    def event_id(self) -> int: ...
    @property
    def tier(self) -> Tier: ...
    @property
    def kind(self) -> Literal["stored", "removed", "cleared"]: ...
    @property
    def parent(self) -> Optional[int]: ...
    @property
    def blocks(self) -> Union[List[Tuple[int, int]], List[int]]: ...

class RouteDecision:
    """Where a request should go (immutable)."""

    worker_id: int
    dp_rank: int
    overlap_blocks: int
    request_blocks: int
    decode_worker: Optional[Tuple[int, int]]
    session_hit: bool
    @property
    def worker(self) -> Tuple[int, int]: ...

class NatsReplica:
    """This router's replica handle over NATS."""

    def __init__(self, url: str, namespace: str, router_id: int, *, heartbeat: Optional[float] = None) -> None: ...
    @property
    def router_id(self) -> int: ...
    def wait_connected(self, timeout: float) -> bool: ...
    def wait_caught_up(self, timeout: float) -> bool: ...
    def stats(self) -> Dict[str, Any]: ...

EventArg = Union[RouterEvent, Dict[str, Any]]
Dump = Tuple[Sequence[EventArg], int]
"""A stream's whole state: events that rebuild it on an empty index, and the id of the last
published event they include (0 when none was published)."""

class RecoverySource(Protocol):
    """The engine side's record of its KV events, for ``KvRouter.run_recovery`` (the Rust
    ``RecoverySource``). Raising ``LookupError`` means the source serves no such stream; any other
    exception, that it is unavailable; recovery retries both with backoff."""

    def events_since(self, worker_id: int, dp_rank: int, tier: Tier, from_id: int) -> Union[Sequence[EventArg], Dump]:
        """The stream's events from ``from_id`` on (a list), or a dump (a tuple) when they are gone."""
    def full_dump(self, worker_id: int, dp_rank: int, tier: Tier) -> Dump:
        """The stream's whole state."""

class KvRouter:
    """The KV-cache-aware router.

    Settings left as None keep the Rust defaults of ``RouterConfig::new(block_size)``:
    overlap_score_weight=1.0, queued_prefill_weight=None, temperature=0.0, use_kv_events=True,
    host_hit_weight=0.75, disk_hit_weight=0.25, external_hit_weight=0.1,
    track_active_blocks=True, expiry=300.0 s (0 turns it off), approx_ttl=120.0 s,
    approx_max_blocks=65536, approx_lag=0.001 s (how long a decision may wait for approximate
    mode's recorder thread; 0 indexes it on the calling thread), session_idle_ttl=600.0 s, session_load_bound=2.0, index_lanes=2,
    recovery=False, seed=None (random).
    """

    def __init__(
        self,
        block_size: int,
        *,
        overlap_score_weight: Optional[float] = None,
        queued_prefill_weight: Optional[float] = None,
        temperature: Optional[float] = None,
        use_kv_events: Optional[bool] = None,
        host_hit_weight: Optional[float] = None,
        disk_hit_weight: Optional[float] = None,
        external_hit_weight: Optional[float] = None,
        track_active_blocks: Optional[bool] = None,
        expiry: Optional[float] = None,
        approx_ttl: Optional[float] = None,
        approx_max_blocks: Optional[int] = None,
        approx_lag: Optional[float] = None,
        session_idle_ttl: Optional[float] = None,
        session_load_bound: Optional[float] = None,
        index_lanes: Optional[int] = None,
        recovery: bool = False,
        seed: Optional[int] = None,
        replica: Optional[NatsReplica] = None,
    ) -> None: ...
    @property
    def block_size(self) -> int: ...
    def add_worker(self, worker_id: int, dp_rank: int = 0, role: Role = "both") -> List[str]: ...
    def remove_worker(self, worker_id: int) -> List[str]: ...
    def workers(self) -> List[Tuple[int, int, Role]]: ...
    def route(
        self,
        tokens: Tokens,
        *,
        request_id: Optional[str] = None,
        update_states: Optional[bool] = None,
        lora_name: Optional[str] = None,
        cache_namespace: Optional[str] = None,
        allowed_workers: Optional[Sequence[int]] = None,
        pinned_worker: Union[int, Tuple[int, int], None] = None,
        session_id: Optional[str] = None,
        overlap_score_weight: Optional[float] = None,
        temperature: Optional[float] = None,
    ) -> RouteDecision:
        """The worker for a prompt of ``tokens``; with ``request_id`` it is recorded as in flight
        there until ``free(request_id)``. Buffers are read in place; prompts of 1024 tokens or
        more are routed with the GIL released (an array's blocks are hashed just before)."""
    def _route_ns(self, tokens: Tokens) -> int:
        """Benchmark hook: the Rust ``route`` call alone for ``tokens``, timed inside, in ns."""
    def add_request(self, request_id: str, tokens: Tokens, worker_id: int, dp_rank: int = 0) -> List[str]: ...
    def mark_prefill_completed(self, request_id: str) -> None: ...
    def add_output_block(self, request_id: str) -> None: ...
    def free(self, request_id: str) -> None: ...
    def apply_event(self, event: Union[RouterEvent, Dict[str, Any]]) -> None: ...
    def flush(self) -> None: ...
    def potential_loads(self, tokens: Tokens) -> List[Dict[str, int]]: ...
    def overlap_blocks(self, tokens: Tokens, worker_id: int, dp_rank: int = 0) -> int: ...
    def stats(self) -> Dict[str, Any]: ...
    def worker_restarted(self, worker_id: int, dp_rank: int = 0) -> None:
        """The worker lost its state (e.g. came back under a new instance): with recovery on, its
        streams are restored from full dumps at the next ``run_recovery``; without, its blocks
        leave the index. Raises IndexDownError if the index lanes have stopped."""
    def expire_now(self) -> List[str]:
        """Expires approximate-mode blocks and in-flight requests past their TTLs now; returns
        the expired requests' ids."""
    def run_recovery(self, source: RecoverySource) -> int:
        """Runs the recovery fetches due now against ``source`` (recovery on; otherwise does
        nothing); returns how many ran. Never call it from the routing path."""
    def recovery_due(self) -> Optional[float]:
        """Seconds until the next recovery retry is due (0: due now), or None."""
    def save_snapshot(self, path: Union[str, "os.PathLike[str]"]) -> None: ...
    def restore_snapshot(self, path: Union[str, "os.PathLike[str]"]) -> None: ...

class BlockHasher:
    """Dynamo's block and sequence hashes of a prompt."""

    def __init__(self, block_size: int, *, lora_name: Optional[str] = None, cache_namespace: Optional[str] = None) -> None: ...
    @property
    def block_size(self) -> int: ...
    @property
    def seed(self) -> int: ...
    def local_hashes(self, tokens: Tokens) -> List[int]: ...
    def sequence_hashes(self, tokens: Tokens) -> List[int]: ...
    def hash_request(self, tokens: Tokens) -> Tuple[List[int], List[int]]: ...

class DecodedBatch:
    seq: int
    ts: float
    dp_rank: Optional[int]
    skipped: int
    events: List[RouterEvent]

class VllmDecoder:
    """vLLM/SGLang KV event batches (msgpack) in, RouterEvents out."""

    def __init__(self, worker_id: int, *, default_dp_rank: int = 0) -> None: ...
    @property
    def worker_id(self) -> int: ...
    def decode_batch(self, seq: int, payload: bytes) -> DecodedBatch: ...
    def decode_message(self, frames: Sequence[bytes]) -> DecodedBatch: ...

Endpoint = Union[Tuple[int, str], Dict[str, Any]]

class ZmqSubscriber:
    """Feeds engines' ZMQ KV event streams into a router on threads of its own."""

    def __init__(
        self,
        router: KvRouter,
        endpoints: Iterable[Endpoint],
        *,
        reconnect: Optional[float] = None,
        replay_timeout: Optional[float] = None,
    ) -> None: ...
    def stop(self) -> None: ...
    @property
    def running(self) -> bool: ...
    def stats(self) -> List[Dict[str, Any]]: ...
    def __enter__(self) -> "ZmqSubscriber": ...
    def __exit__(
        self,
        ty: Optional[type],
        value: Optional[BaseException],
        tb: Optional[TracebackType],
    ) -> bool: ...
