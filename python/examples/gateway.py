"""A KV-cache-aware FastAPI gateway in front of vLLM-style engines, on kvroute.

    KVROUTE_WORKERS="1=http://127.0.0.1:8001,2=http://127.0.0.1:8002" \
    KVROUTE_KV_EVENTS="1=tcp://127.0.0.1:5557+tcp://127.0.0.1:5558,2=tcp://127.0.0.1:5567" \
    KVROUTE_TOKENIZER=tokenizer.json uvicorn gateway:app

Each completion request is tokenized (Hugging Face `tokenizers`), routed by `KvRouter` to the
engine whose KV cache holds the longest prefix of its prompt (weighed against load), forwarded
as it came with httpx, and freed from the load tracker when the engine answers. The engines'
KV events (vLLM's `--kv-events-config` ZMQ publisher, and its replay socket after a `+`) reach
the router through a `ZmqSubscriber` running on threads of its own.
"""

from __future__ import annotations

import array
import contextlib
import itertools
import os
from typing import Any, AsyncIterator, Dict, List, Mapping, Optional

import httpx
from fastapi import FastAPI, HTTPException
from tokenizers import Tokenizer

import kvroute


def parse_map(spec: str) -> Dict[int, str]:
    """`"1=http://a,2=http://b"` as `{1: "http://a", 2: "http://b"}`."""
    out: Dict[int, str] = {}
    for item in filter(None, spec.split(",")):
        worker_id, value = item.split("=", 1)
        out[int(worker_id)] = value.rstrip("/")
    return out


def endpoints(kv_events: Mapping[int, str]) -> List[Dict[str, Any]]:
    """ZmqSubscriber endpoints from `{worker: "tcp://publisher[+tcp://replay]"}`."""
    out: List[Dict[str, Any]] = []
    for worker_id, spec in kv_events.items():
        publisher, _, replay = spec.partition("+")
        endpoint: Dict[str, Any] = {"worker_id": worker_id, "publisher": publisher}
        if replay:
            endpoint["replay"] = replay
        out.append(endpoint)
    return out


def create_app(
    workers: Mapping[int, str],
    tokenizer: Tokenizer,
    *,
    kv_events: Optional[Mapping[int, str]] = None,
    block_size: int = 16,
) -> FastAPI:
    """The gateway over `workers` (id -> base URL), fed by their `kv_events` (id -> address)."""
    router = kvroute.KvRouter(block_size)
    for worker_id in workers:
        router.add_worker(worker_id)
    ids = itertools.count()

    @contextlib.asynccontextmanager
    async def lifespan(app: FastAPI) -> AsyncIterator[None]:
        # The subscriber's threads and the HTTP client live as long as the server.
        async with httpx.AsyncClient(timeout=60.0) as http:
            app.state.http = http
            with kvroute.ZmqSubscriber(router, endpoints(kv_events or {})) as subscriber:
                app.state.subscriber = subscriber
                yield

    app = FastAPI(title="kvroute gateway", lifespan=lifespan)
    app.state.router = router

    @app.post("/v1/completions")
    async def completions(body: Dict[str, Any]) -> Dict[str, Any]:
        prompt = body.get("prompt")
        if not isinstance(prompt, str):
            raise HTTPException(status_code=400, detail="prompt must be a string")
        tokens = array.array("I", tokenizer.encode(prompt).ids)
        request_id = f"req-{next(ids)}"
        try:
            decision = router.route(tokens, request_id=request_id)
        except kvroute.RouteError as e:
            raise HTTPException(status_code=503, detail=f"{e.kind}: {e}") from e
        try:
            http: httpx.AsyncClient = app.state.http
            response = await http.post(f"{workers[decision.worker_id]}/v1/completions", json=body)
            response.raise_for_status()
            answer: Dict[str, Any] = response.json()
        except httpx.HTTPError as e:
            raise HTTPException(status_code=502, detail=str(e)) from e
        finally:
            router.free(request_id)
        answer["kvroute"] = {
            "worker_id": decision.worker_id,
            "overlap_blocks": decision.overlap_blocks,
            "request_blocks": decision.request_blocks,
        }
        return answer

    @app.get("/stats")
    async def stats() -> Dict[str, Any]:
        subscriber: kvroute.ZmqSubscriber = app.state.subscriber
        return {"router": router.stats(), "kv_events": subscriber.stats()}

    return app


def app_from_env() -> FastAPI:
    """The gateway configured by KVROUTE_WORKERS, KVROUTE_KV_EVENTS, KVROUTE_TOKENIZER and
    KVROUTE_BLOCK_SIZE (the engines' KV block size)."""
    return create_app(
        parse_map(os.environ["KVROUTE_WORKERS"]),
        Tokenizer.from_file(os.environ["KVROUTE_TOKENIZER"]),
        kv_events=parse_map(os.environ.get("KVROUTE_KV_EVENTS", "")),
        block_size=int(os.environ.get("KVROUTE_BLOCK_SIZE", "16")),
    )


if os.environ.get("KVROUTE_WORKERS"):
    app = app_from_env()
