"""kvroute: KV-cache-aware request routing for LLM inference fleets.

The classes are implemented in Rust (``kvroute._kvroute``); see ``__init__.pyi`` for
their signatures and the Rust defaults of ``KvRouter``'s settings.
"""

from typing import Any, Protocol

from kvroute._kvroute import (
    BlockHasher,
    ConfigError,
    DecodedBatch,
    EventError,
    IndexDownError,
    KvRouter,
    KvrouteError,
    NatsError,
    NatsReplica,
    RouteDecision,
    RouteError,
    RouterEvent,
    SnapshotError,
    UnknownRequestError,
    VllmDecoder,
    WireError,
    ZmqError,
    ZmqSubscriber,
    __version__,
)


class RecoverySource(Protocol):
    """The engine side's record of its KV events, for ``KvRouter.run_recovery`` (the Rust
    ``RecoverySource``); see ``__init__.pyi``. Any object with these two methods will do."""

    def events_since(self, worker_id: int, dp_rank: int, tier: str, from_id: int) -> Any:
        """The stream's events from ``from_id`` on (a list), or a dump ``(events, last_event_id)``."""

    def full_dump(self, worker_id: int, dp_rank: int, tier: str) -> Any:
        """The stream's whole state: ``(events, last_event_id)``."""

__all__ = [
    "BlockHasher",
    "ConfigError",
    "DecodedBatch",
    "EventError",
    "IndexDownError",
    "KvRouter",
    "KvrouteError",
    "NatsError",
    "NatsReplica",
    "RecoverySource",
    "RouteDecision",
    "RouteError",
    "RouterEvent",
    "SnapshotError",
    "UnknownRequestError",
    "VllmDecoder",
    "WireError",
    "ZmqError",
    "ZmqSubscriber",
    "__version__",
]
