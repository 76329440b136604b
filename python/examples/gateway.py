"""A KV-cache-aware FastAPI gateway in front of inference engines, on kvroute.

    KVROUTE_WORKERS="1=http://127.0.0.1:8001,2=http://127.0.0.1:8002" \
    KVROUTE_TOKENIZER=tokenizer.json uvicorn gateway:app

Each completion request is tokenized (Hugging Face `tokenizers`), routed by `KvRouter` to the
engine whose KV cache holds the longest prefix of its prompt (weighed against load), forwarded
with httpx, and freed from the load tracker when the engine answers. Engines' KV events, in
Dynamo's JSON shape, are posted to /events (a real deployment would use `ZmqSubscriber`).
"""

from __future__ import annotations

import array
import itertools
import os
from typing import Any, Dict, List, Mapping, Optional

import httpx
from fastapi import FastAPI, HTTPException
from pydantic import BaseModel
from tokenizers import Tokenizer

import kvroute


class CompletionRequest(BaseModel):
    """The part of an OpenAI-style completion request the gateway reads."""

    prompt: str
    max_tokens: int = 16


def parse_workers(spec: str) -> Dict[int, str]:
    """`"1=http://a,2=http://b"` as `{1: "http://a", 2: "http://b"}`."""
    workers: Dict[int, str] = {}
    for item in filter(None, spec.split(",")):
        worker_id, url = item.split("=", 1)
        workers[int(worker_id)] = url.rstrip("/")
    return workers


def create_app(
    workers: Mapping[int, str],
    tokenizer: Tokenizer,
    *,
    block_size: int = 16,
    client: Optional[httpx.AsyncClient] = None,
) -> FastAPI:
    """The gateway over `workers` (id -> base URL)."""
    router = kvroute.KvRouter(block_size)
    for worker_id in workers:
        router.add_worker(worker_id)
    ids = itertools.count()
    http = client or httpx.AsyncClient(timeout=60.0)
    app = FastAPI(title="kvroute gateway")
    app.state.router = router

    @app.post("/v1/completions")
    async def completions(request: CompletionRequest) -> Dict[str, Any]:
        tokens = array.array("I", tokenizer.encode(request.prompt).ids)
        request_id = f"req-{next(ids)}"
        try:
            decision = router.route(tokens, request_id=request_id)
        except kvroute.RouteError as e:
            raise HTTPException(status_code=503, detail=f"{e.kind}: {e}") from e
        try:
            response = await http.post(
                f"{workers[decision.worker_id]}/v1/completions",
                json={"prompt": request.prompt, "max_tokens": request.max_tokens},
            )
            response.raise_for_status()
            body: Dict[str, Any] = response.json()
        except httpx.HTTPError as e:
            raise HTTPException(status_code=502, detail=str(e)) from e
        finally:
            router.free(request_id)
        body["kvroute"] = {
            "worker_id": decision.worker_id,
            "overlap_blocks": decision.overlap_blocks,
            "request_blocks": decision.request_blocks,
        }
        return body

    @app.post("/events")
    async def events(batch: List[Dict[str, Any]]) -> Dict[str, int]:
        for event in batch:
            try:
                router.apply_event(event)
            except kvroute.EventError as e:
                raise HTTPException(status_code=400, detail=str(e)) from e
        return {"applied": len(batch)}

    @app.get("/stats")
    async def stats() -> Dict[str, Any]:
        return router.stats()

    return app


def app_from_env() -> FastAPI:
    """The gateway configured by KVROUTE_WORKERS, KVROUTE_TOKENIZER and KVROUTE_BLOCK_SIZE."""
    tokenizer = Tokenizer.from_file(os.environ["KVROUTE_TOKENIZER"])
    workers = parse_workers(os.environ["KVROUTE_WORKERS"])
    return create_app(workers, tokenizer, block_size=int(os.environ.get("KVROUTE_BLOCK_SIZE", "16")))


if os.environ.get("KVROUTE_WORKERS"):
    app = app_from_env()
