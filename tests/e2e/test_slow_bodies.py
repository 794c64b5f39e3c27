"""Slow request bodies and the places in flight (issue 47): clients on raw sockets trickling bodies a byte at a
time, against the real ``ragbus serve`` in its own process, then against a real uvicorn running the gateway's
protocol and guard in front of an app that holds requests for as long as a test wants."""

from __future__ import annotations

import asyncio
import contextlib
import select
import socket
import threading
import time
from collections.abc import Iterator

import httpx
import pytest
import uvicorn

from ragbus.gateway.guard import Guard
from ragbus.gateway.http_limits import HeadLimits, protocol_with
from ragbus.gateway.keys import gather
from ragbus.testing.gateway import GatewayProcess

from ..helpers.serve_stores import stores

QUESTION = {"question": "How does a context manager wrap a block of code?"}
KEYS = "KA=read@c1, sk-admin, KB=read@default"
# Long enough for the asks below to happen while every body still trickles, on a loaded machine too (at 8 s,
# three rounds of asks beside stress-ng outlasted it).
BODY_TIMEOUT_S = 30.0
TRICKLERS = 70  # more than max_in_flight (64): before the fix, enough to lock every key out
WAIT_S = 60.0  # a bound on waiting for what must happen much sooner


def bearer(key: str) -> dict[str, str]:
    return {"Authorization": f"Bearer {key}"}


def trickled_head(key: str, path: str = "/v1/ask", length: int = 8_000_000) -> bytes:
    """A request's head declaring a big body, and the body's first byte."""
    return (f"POST {path} HTTP/1.1\r\nHost: x\r\nAuthorization: Bearer {key}\r\nContent-Type: application/json\r\n"
            f"Content-Length: {length}\r\n\r\n{{").encode()


@contextlib.contextmanager
def trickling(port: int, key: str, count: int, path: str = "/v1/ask") -> Iterator[dict[socket.socket, float]]:
    """``count`` connections sending a body a byte every 0.5 s (never idle long enough to be closed for it):
    each socket, with when its head was sent."""
    sockets: dict[socket.socket, float] = {}
    stop = threading.Event()

    def trickle() -> None:
        while not stop.wait(0.5):
            for s in list(sockets):
                with contextlib.suppress(OSError):  # the server cut it: that is what some tests wait for
                    s.send(b" ")

    try:
        for _ in range(count):
            s = socket.create_connection(("127.0.0.1", port), timeout=WAIT_S)
            s.sendall(trickled_head(key, path))
            sockets[s] = time.monotonic()
        thread = threading.Thread(target=trickle, daemon=True)
        thread.start()
        yield sockets
    finally:
        stop.set()
        for s in sockets:
            s.close()


def none_answered(sockets) -> bool:
    return not select.select(list(sockets), [], [], 0)[0]


def answers_and_ends(sockets: dict[socket.socket, float]) -> dict[socket.socket, tuple[bytes, float]]:
    """What the server sends each socket up to its end, and how long after its head the answer came."""
    first: dict[socket.socket, float] = {}
    data = {s: b"" for s in sockets}
    open_ = set(sockets)
    deadline = time.monotonic() + BODY_TIMEOUT_S + WAIT_S
    while open_:
        assert time.monotonic() < deadline, f"{len(open_)} of {len(sockets)} trickling connections still open"
        for s in select.select(list(open_), [], [], 1.0)[0]:
            try:
                more = s.recv(65536)
            except ConnectionResetError:
                more = b""
            if more and s not in first:
                first[s] = time.monotonic() - sockets[s]
            data[s] += more
            if not more:
                open_.discard(s)
    return {s: (data[s], first.get(s, float("inf"))) for s in sockets}


# -- the real command ---------------------------------------------------------------------------------------


@pytest.fixture(scope="module")
def gateway(tmp_path_factory):
    env = {"RAGBUS_DATA_DIR": str(stores(tmp_path_factory)), "RAGBUS_API_KEYS": KEYS,
           "RAGBUS_GATEWAY__BODY_TIMEOUT_S": f"{BODY_TIMEOUT_S:g}"}
    with GatewayProcess(env=env, log_path=tmp_path_factory.mktemp("slow-bodies") / "serve.log") as g:
        yield g


@pytest.mark.timeout(600)
def test_bodies_trickled_by_one_key_lock_nobody_out_and_end_with_408_at_the_body_timeout(gateway):
    """The report: 70 connections of key KA declaring 8 MB bodies and sending a byte at a time. Meanwhile the
    admin, another key and KA itself are answered; each trickle is cut with 408 once past body_timeout_s,
    and logged once."""
    with trickling(gateway.port, "KA", TRICKLERS) as sockets:
        asked_until, rounds = time.monotonic() + 2.0, 0
        with httpx.Client(base_url=gateway.url, timeout=WAIT_S) as client:
            while rounds < 3 or time.monotonic() < asked_until:  # the heads are read within this, by far
                admin = client.post("/v1/ask", json=QUESTION, headers=bearer("sk-admin"))
                assert admin.status_code == 200, admin.text
                other = client.post("/v1/ask", json=QUESTION, headers=bearer("KB"))
                assert other.status_code == 200, other.text
                own = client.post("/v1/ask", json={**QUESTION, "collection": "c1"}, headers=bearer("KA"))
                assert own.json()["error"]["type"] == "EmptyCollection", own.text  # answered: c1 holds nothing
                rounds += 1
        assert none_answered(sockets), "a trickle was cut before the asks were done: BODY_TIMEOUT_S is too short"

        ended = answers_and_ends(sockets)
    for data, after in ended.values():
        assert data.startswith(b"HTTP/1.1 408 "), data[:200]
        assert b'"type":"BodyTimeout"' in data and f"body_timeout_s={BODY_TIMEOUT_S:g}".encode() in data
        # the server's clock started after the head was sent (0.1 s for the two clocks' reading: 7.9999 was seen)
        assert after >= BODY_TIMEOUT_S - 0.1
    logged = [line for line in gateway.log_path.read_text().splitlines()
              if f"took over body_timeout_s={BODY_TIMEOUT_S:g}" in line]
    assert len(logged) == TRICKLERS, "\n".join(logged[:5])  # once per request, not per byte
    assert httpx.post(f"{gateway.url}/v1/ask", json=QUESTION, headers=bearer("sk-admin"), timeout=WAIT_S).is_success


# -- the guard's places, with requests held in the app --------------------------------------------------------


class Holding:
    """An app for the guard: ``/hold`` is answered once ``release`` is set, anything else at once."""

    def __init__(self) -> None:
        self.held = 0
        self.release = threading.Event()

    async def __call__(self, scope, receive, send) -> None:
        while (await receive()).get("more_body"):
            pass
        if scope["path"] == "/hold":
            self.held += 1
            await asyncio.to_thread(self.release.wait)
            self.held -= 1
        await send({"type": "http.response.start", "status": 200, "headers": [(b"content-length", b"2")]})
        await send({"type": "http.response.body", "body": b"ok"})

    def wait_held(self, count: int) -> None:
        deadline = time.monotonic() + WAIT_S
        while self.held != count:  # the server's thread counts; no event crosses to this one
            assert time.monotonic() < deadline, f"{self.held} requests held, not {count}"
            time.sleep(0.01)


@contextlib.contextmanager
def guarded(keys: list[str], *, max_in_flight: int, max_in_flight_per_key: int) -> Iterator[tuple[int, Holding]]:
    """A real uvicorn on a loopback port: the gateway's protocol and guard in front of ``Holding``."""
    app = Holding()
    guard = Guard(app, api_keys=gather(keys), max_body_bytes=10_000_000, max_in_flight=max_in_flight,
                  max_in_flight_per_key=max_in_flight_per_key, retry_after_s=7)
    limits = HeadLimits(max_head_bytes=64 * 1024, head_timeout_s=10.0, idle_timeout_s=5.0, body_timeout_s=WAIT_S)
    sock = socket.create_server(("127.0.0.1", 0))
    server = uvicorn.Server(uvicorn.Config(guard, http=protocol_with(limits), lifespan="off", log_level="warning",
                                           timeout_keep_alive=5))
    thread = threading.Thread(target=lambda: asyncio.run(server.serve(sockets=[sock])), daemon=True)
    thread.start()
    try:
        yield sock.getsockname()[1], app
    finally:
        app.release.set()
        server.should_exit = True
        thread.join(10)
        sock.close()


def hold(port: int, key: str | None) -> socket.socket:
    s = socket.create_connection(("127.0.0.1", port), timeout=WAIT_S)
    auth = f"Authorization: Bearer {key}\r\n" if key else ""
    s.sendall(f"POST /hold HTTP/1.1\r\nHost: x\r\n{auth}Content-Length: 2\r\n\r\n{{}}".encode())
    return s


def test_one_key_takes_at_most_its_share_and_the_others_are_served_meanwhile():
    with guarded(["KA=read@c1", "sk-admin", "KB=read@c1"], max_in_flight=4, max_in_flight_per_key=2) as (port, app):
        url = f"http://127.0.0.1:{port}/v1/ask"
        held = [hold(port, "KA"), hold(port, "KA")]
        app.wait_held(2)
        refused = httpx.post(url, json=QUESTION, headers=bearer("KA"))
        assert refused.status_code == 429 and refused.headers["retry-after"] == "7"
        assert refused.json()["error"]["type"] == "TooManyRequests"
        assert httpx.post(url, json=QUESTION, headers=bearer("sk-admin")).status_code == 200
        assert httpx.post(url, json=QUESTION, headers=bearer("KB")).status_code == 200

        held += [hold(port, "KB"), hold(port, "KB")]
        app.wait_held(4)  # every place taken: the bound of the whole gateway
        full = httpx.post(url, json=QUESTION, headers=bearer("sk-admin"))
        assert full.status_code == 503 and full.headers["retry-after"] == "7"
        assert full.json()["error"]["type"] == "Overloaded"

        app.release.set()
        app.wait_held(0)
        for s in held:
            assert s.recv(65536).startswith(b"HTTP/1.1 200 ")
            s.close()
        assert httpx.post(url, json=QUESTION, headers=bearer("KA")).status_code == 200


def test_a_body_still_arriving_holds_no_place():
    with guarded(["KA=read@c1", "sk-admin"], max_in_flight=4, max_in_flight_per_key=2) as (port, app), \
            trickling(port, "KA", 10, "/hold") as sockets:
        url = f"http://127.0.0.1:{port}/v1/ask"
        deadline = time.monotonic() + 2.0
        while time.monotonic() < deadline:  # the heads are read within this, by far
            assert httpx.post(url, json=QUESTION, headers=bearer("KA")).status_code == 200
            assert httpx.post(url, json=QUESTION, headers=bearer("sk-admin")).status_code == 200
        assert app.held == 0 and none_answered(sockets)


def test_with_no_keys_only_the_gateway_bound_applies():
    """No keys: one caller, whose requests may take every place."""
    with guarded([], max_in_flight=4, max_in_flight_per_key=2) as (port, app):
        held = [hold(port, None) for _ in range(3)]
        app.wait_held(3)
        assert httpx.post(f"http://127.0.0.1:{port}/v1/ask", json=QUESTION).status_code == 200
        held.append(hold(port, None))
        app.wait_held(4)
        assert httpx.post(f"http://127.0.0.1:{port}/v1/ask", json=QUESTION).status_code == 503
        app.release.set()
        for s in held:
            assert s.recv(65536).startswith(b"HTTP/1.1 200 ")
            s.close()
