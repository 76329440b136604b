"""kvroute: KV-cache-aware request routing for LLM inference fleets.

The classes are implemented in Rust (``kvroute._kvroute``); see ``__init__.pyi`` for
their signatures and the Rust defaults of ``KvRouter``'s settings.
"""

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
