"""NatsReplica: two routers sharing their requests in flight through a real nats-server that
this test starts on a free loopback port."""

import os
import shutil
import socket
import subprocess
import time

import pytest

import kvroute
from kvroute import KvRouter, NatsReplica


def nats_binary():
    for candidate in (os.environ.get("NATS_SERVER"), shutil.which("nats-server"), "/usr/sbin/nats-server"):
        if candidate and os.access(candidate, os.X_OK):
            return candidate
    pytest.fail("nats-server is needed (scripts/install-test-deps installs it; NATS_SERVER=/path picks one)")


def free_port():
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def wait_until(what, cond, timeout=20.0):
    deadline = time.monotonic() + timeout
    while not cond():
        if time.monotonic() > deadline:
            raise AssertionError(f"timed out waiting for {what}")
        time.sleep(0.02)


def active(router, worker):
    return {l["worker_id"]: l["active_requests"] for l in router.potential_loads([1, 2, 3, 4])}[worker]


def test_replicas_share_requests_in_flight():
    port = free_port()
    server = subprocess.Popen([nats_binary(), "-a", "127.0.0.1", "-p", str(port)],
                              stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    try:
        url = f"nats://127.0.0.1:{port}"
        ra, rb = NatsReplica(url, "pytest", 1, heartbeat=0.1), NatsReplica(url, "pytest", 2, heartbeat=0.1)
        assert ra.router_id == 1
        a, b = KvRouter(4, replica=ra), KvRouter(4, replica=rb)
        for r in (a, b):
            r.add_worker(1)
        assert ra.wait_connected(10.0) and rb.wait_connected(10.0)
        assert a.route(list(range(16)), request_id="x").worker_id == 1
        wait_until("the peer to see the request", lambda: active(b, 1) == 1)
        a.free("x")
        wait_until("the peer to see it freed", lambda: active(b, 1) == 0)
        assert ra.stats()["connected"] and ra.stats()["published"] >= 2
        with pytest.raises(kvroute.NatsError):
            KvRouter(4, replica=ra)  # a replica feeds one router
    finally:
        server.terminate()
        server.wait(timeout=10)


def test_bad_nats_settings():
    with pytest.raises(kvroute.NatsError):
        NatsReplica("not a url", "ns", 1)
    with pytest.raises(kvroute.NatsError):
        NatsReplica("nats://127.0.0.1:1", "", 1)
