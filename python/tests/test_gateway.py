"""The example gateway (examples/gateway.py) served by uvicorn on loopback, in front of two
stub engines (http.server) this test starts: requests go to the engine holding their prefix."""

import importlib.util
import json
import threading
import time
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

import pytest

from kvroute import BlockHasher, RouterEvent
from conftest import REPO

httpx = pytest.importorskip("httpx")
uvicorn = pytest.importorskip("uvicorn")
tokenizers = pytest.importorskip("tokenizers")
pytest.importorskip("fastapi")

BLOCK = 4


def load_gateway():
    spec = importlib.util.spec_from_file_location("gateway", REPO / "python" / "examples" / "gateway.py")
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def stub_engine(worker_id):
    """An engine that answers /v1/completions with its id and the prompt it got."""

    class Handler(BaseHTTPRequestHandler):
        def do_POST(self):
            body = json.loads(self.rfile.read(int(self.headers["Content-Length"])))
            out = json.dumps({"engine": worker_id, "prompt": body["prompt"], "text": "ok"}).encode()
            self.send_response(200)
            self.send_header("Content-Type", "application/json")
            self.send_header("Content-Length", str(len(out)))
            self.end_headers()
            self.wfile.write(out)

        def log_message(self, *args):
            pass

    server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
    threading.Thread(target=server.serve_forever, daemon=True).start()
    return server


def word_tokenizer():
    vocab = {"[UNK]": 0, **{f"w{i}": i + 1 for i in range(1000)}}
    tok = tokenizers.Tokenizer(tokenizers.models.WordLevel(vocab, unk_token="[UNK]"))
    tok.pre_tokenizer = tokenizers.pre_tokenizers.Whitespace()
    return tok


def test_gateway_routes_to_the_engine_with_the_prefix():
    gateway = load_gateway()
    engines = {1: stub_engine(1), 2: stub_engine(2)}
    workers = {w: f"http://127.0.0.1:{s.server_address[1]}" for w, s in engines.items()}
    tok = word_tokenizer()
    app = gateway.create_app(workers, tok, block_size=BLOCK)
    server = uvicorn.Server(uvicorn.Config(app, host="127.0.0.1", port=0, log_level="warning"))
    thread = threading.Thread(target=server.run, daemon=True)
    thread.start()
    try:
        deadline = time.monotonic() + 20
        while not server.started:
            assert time.monotonic() < deadline, "uvicorn did not start"
            time.sleep(0.02)
        port = server.servers[0].sockets[0].getsockname()[1]
        base = f"http://127.0.0.1:{port}"
        prompts = {1: " ".join(f"w{i}" for i in range(100, 132)), 2: " ".join(f"w{i}" for i in range(500, 532))}
        hasher = BlockHasher(BLOCK)
        with httpx.Client(base_url=base, timeout=20) as client:
            # Each engine reports caching its prompt (Dynamo's JSON shape).
            events = []
            for worker, prompt in prompts.items():
                local, seq = hasher.hash_request(tok.encode(prompt).ids)
                events.append(RouterEvent.stored(worker, 1, list(zip(local, seq))).to_dict())
            assert client.post("/events", json=events).json() == {"applied": 2}
            app.state.router.flush()
            for worker, prompt in list(prompts.items()) * 2:
                r = client.post("/v1/completions", json={"prompt": prompt})
                assert r.status_code == 200, r.text
                body = r.json()
                assert body["engine"] == worker and body["prompt"] == prompt
                assert body["kvroute"] == {"worker_id": worker, "overlap_blocks": 8, "request_blocks": 8}
            assert client.post("/events", json=[{"worker_id": 1}]).status_code == 400
            stats = client.get("/stats").json()
            assert stats["decisions"] == 4 and stats["workers"] == 2
        # Every request was freed once its engine answered.
        assert all(l["active_requests"] == 0 for l in app.state.router.potential_loads([1, 2, 3, 4]))
    finally:
        server.should_exit = True
        thread.join(timeout=10)
        for s in engines.values():
            s.shutdown()
