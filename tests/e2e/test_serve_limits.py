"""The HTTP limits of the gateway's protocol, with real clients on raw sockets: a real uvicorn on a loopback port
running ``HeadLimitedProtocol``, then the real ``ragbus serve`` in its own process, whose memory is read from
/proc while clients send huge or slow heads."""

from __future__ import annotations

import asyncio
import contextlib
import select
import socket
import threading
import time
from pathlib import Path

import pytest
import uvicorn

from ragbus.gateway.http_limits import HeadLimits, protocol_with
from ragbus.testing.gateway import GatewayProcess

from ..helpers.serve_stores import stores

LIMITS = HeadLimits(max_head_bytes=64 * 1024, head_timeout_s=1.0, idle_timeout_s=1.0, body_timeout_s=2.0)
BOUND_S = 5.0  # a connection the limits above end must end well within this


async def echo(scope, receive, send) -> None:
    """Answers ``<method> <path> <body length>``: what the server read of each request."""
    body = b""
    while True:
        message = await receive()
        body += message.get("body", b"")
        if not message.get("more_body"):
            break
    text = f"{scope['method']} {scope['path']} {len(body)}".encode()
    await send({"type": "http.response.start", "status": 200, "headers": [(b"content-length", b"%d" % len(text))]})
    await send({"type": "http.response.body", "body": text})


@pytest.fixture
def server(served):
    return served[0]


@pytest.fixture
def served():
    """A real uvicorn serving ``echo`` with the limits, on a socket bound (and listening) before it starts, as
    ``ragbus serve`` binds its own: its port and the server."""
    sock = socket.create_server(("127.0.0.1", 0))
    config = uvicorn.Config(echo, http=protocol_with(LIMITS), lifespan="off", log_level="warning",
                            timeout_keep_alive=LIMITS.idle_timeout_s)  # type: ignore[arg-type]
    running = uvicorn.Server(config)
    thread = threading.Thread(target=lambda: asyncio.run(running.serve(sockets=[sock])), daemon=True)
    thread.start()
    yield sock.getsockname()[1], running
    running.should_exit = True
    thread.join(10)
    sock.close()


def connect(port: int) -> socket.socket:
    s = socket.create_connection(("127.0.0.1", port), timeout=BOUND_S)
    _UNREAD.pop(s.fileno(), None)  # a number an earlier socket may have had
    return s


def head(header_bytes: int, path: str = "/", extra: bytes = b"") -> bytes:
    return f"GET {path} HTTP/1.1\r\nHost: x\r\nX-Big: ".encode() + b"a" * header_bytes + b"\r\n" + extra + b"\r\n"


_UNREAD: dict[int, bytes] = {}  # per socket: bytes read past the answer returned, the next answer's start


def read_answer(s: socket.socket) -> tuple[int, bytes, dict[bytes, bytes]]:
    """One answer: status, body, headers (by its Content-Length); what follows it is kept for the next call."""
    data = _UNREAD.pop(s.fileno(), b"")
    while b"\r\n\r\n" not in data:
        more = s.recv(65536)
        assert more, f"closed before an answer: {data!r}"
        data += more
    top, _, rest = data.partition(b"\r\n\r\n")
    lines = top.split(b"\r\n")
    headers = dict(line.lower().split(b": ", 1) for line in lines[1:])
    length = int(headers[b"content-length"])
    while len(rest) < length:
        more = s.recv(65536)
        assert more
        rest += more
    _UNREAD[s.fileno()] = rest[length:]
    return int(lines[0].split()[1]), rest[:length], headers


def closed(s: socket.socket) -> bool:
    """Whether the server closes the connection (EOF or reset) after what it sent, each read waiting at most
    BOUND_S (a socket.timeout fails the test)."""
    try:
        while s.recv(65536):
            pass
    except ConnectionResetError:
        pass
    return True


def send_until_answered(s: socket.socket, total: int, prefix: bytes) -> None:
    """Send ``prefix`` then header bytes up to ``total``, stopping once the server answers or ends the connection."""
    s.sendall(prefix)
    sent, chunk = len(prefix), b"a" * 65536
    while sent < total:
        if select.select([s], [], [], 0)[0]:
            return
        try:
            s.sendall(chunk)
        except (BrokenPipeError, ConnectionResetError):
            return
        sent += len(chunk)


@pytest.mark.parametrize("size", [100 * 1024, 1024 ** 2, 10 * 1024 ** 2, 64 * 1024 ** 2])
def test_a_head_over_the_limit_gets_431_and_the_connection_ends(server, size):
    with connect(server) as s:
        send_until_answered(s, size, b"GET / HTTP/1.1\r\nHost: x\r\nX-Big: ")
        status, body, headers = read_answer(s)
        assert status == 431 and headers[b"connection"] == b"close"
        assert b"max_head_bytes=65536" in body
        assert closed(s)


def test_a_head_under_the_limit_is_answered_and_its_body_is_not_counted(server):
    body = b"b" * (3 * LIMITS.max_head_bytes)  # in the same write as its head: none of it is head
    request = head(LIMITS.max_head_bytes - 200, "/post", b"Content-Length: %d\r\n" % len(body)).replace(
        b"GET", b"POST", 1) + body
    with connect(server) as s:
        s.sendall(request)
        assert read_answer(s)[:2] == (200, b"POST /post %d" % len(body))


def test_pipelined_and_kept_alive_requests_are_answered_in_order(server):
    with connect(server) as s:
        s.sendall(head(10, "/one") + head(10, "/two") + head(10, "/three"))
        assert [read_answer(s)[1] for _ in range(3)] == [b"GET /one 0", b"GET /two 0", b"GET /three 0"]
        s.sendall(head(LIMITS.max_head_bytes - 200, "/again"))  # the next head is counted from zero
        assert read_answer(s)[:2] == (200, b"GET /again 0")


def test_every_connection_is_written_with_nagle_off(served):
    """With Nagle's algorithm on, each answer of a kept-alive connection waited for the client's delayed ACK."""
    port, running = served
    with connect(port) as a, connect(port) as b:
        for s in (a, b, a):
            s.sendall(b"GET /x HTTP/1.1\r\nHost: x\r\n\r\n")
            assert read_answer(s)[0] == 200
        connections = list(running.server_state.connections)
        assert len(connections) == 2
        for protocol in connections:
            sock = protocol.transport.get_extra_info("socket")
            assert sock.getsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY) != 0


def test_a_pipelined_head_over_the_limit_is_refused_after_the_answers_before_it(server):
    with connect(server) as s:
        with contextlib.suppress(OSError):  # all of it, whatever comes back meanwhile (the first answer)
            s.sendall(head(10, "/first") + b"GET /second HTTP/1.1\r\nX-Big: " + b"a" * 4 * LIMITS.max_head_bytes)
        assert read_answer(s)[:2] == (200, b"GET /first 0")
        assert read_answer(s)[0] == 431
        assert closed(s)


def test_a_head_sent_slowly_gets_408_within_the_head_timeout(server):
    with connect(server) as s:
        s.sendall(b"GET / HTTP/1.1\r\n")
        started = time.monotonic()
        while not select.select([s], [], [], 0.2)[0]:  # a header line every 0.2 s, never the end of the head
            assert time.monotonic() - started < BOUND_S, "still open past the head timeout"
            s.sendall(b"X-Slow: 1\r\n")
        status, body, _ = read_answer(s)
        assert status == 408 and b"head_timeout_s=1" in body
        assert closed(s)


def test_a_silent_connection_is_closed_after_the_idle_timeout(server):
    with connect(server) as s:  # never sends a byte: closed within BOUND_S, or recv times out and fails
        assert closed(s)
    with connect(server) as s:  # silent after an answer: uvicorn's keep-alive timeout, the same setting
        s.sendall(head(10))
        assert read_answer(s)[0] == 200
        assert closed(s)


def test_a_body_that_stops_coming_gets_408_and_the_connection_closed(server):
    with connect(server) as s:
        s.sendall(b"POST / HTTP/1.1\r\nHost: x\r\nContent-Length: 100\r\n\r\n" + b"x" * 10)
        status, body, _ = read_answer(s)
        assert status == 408 and b"idle_timeout_s=1" in body
        assert closed(s)


def test_a_body_sent_steadily_but_slowly_gets_408_at_the_body_timeout(server):
    """A byte every 0.2 s never lets the connection idle: the body's own deadline ends it."""
    with connect(server) as s:
        s.sendall(b"POST / HTTP/1.1\r\nHost: x\r\nContent-Length: 1000\r\n\r\n")
        started = time.monotonic()
        while not select.select([s], [], [], 0.2)[0]:
            assert time.monotonic() - started < LIMITS.body_timeout_s + BOUND_S, "still open past the body timeout"
            s.sendall(b"x")
        status, body, headers = read_answer(s)
        assert time.monotonic() - started >= LIMITS.body_timeout_s
        assert status == 408 and b"body_timeout_s=2" in body and headers[b"connection"] == b"close"
        assert closed(s)


def test_a_body_within_the_body_timeout_is_read_whole_and_the_connection_kept(server):
    with connect(server) as s:
        s.sendall(b"POST /slow HTTP/1.1\r\nHost: x\r\nContent-Length: 5\r\n\r\n")
        for _ in range(5):  # 1 s of a 2 s deadline
            time.sleep(0.2)  # pacing the client's bytes, not waiting for a verdict
            s.sendall(b"x")
        assert read_answer(s)[:2] == (200, b"POST /slow 5")
        s.sendall(head(10, "/again"))  # the next request's body clock starts afresh
        assert read_answer(s)[:2] == (200, b"GET /again 0")


# -- the real command ---------------------------------------------------------------------------------------


def rss_bytes(pid: int) -> int:
    for line in Path(f"/proc/{pid}/status").read_text().splitlines():
        if line.startswith("VmRSS:"):
            return int(line.split()[1]) * 1024
    raise AssertionError("no VmRSS")


@pytest.fixture(scope="module")
def limited(tmp_path_factory):
    env = {"RAGBUS_DATA_DIR": str(stores(tmp_path_factory)), "RAGBUS_GATEWAY__HEAD_TIMEOUT_S": "1",
           "RAGBUS_GATEWAY__IDLE_TIMEOUT_S": "1"}
    with GatewayProcess(env=env, log_path=tmp_path_factory.mktemp("limits") / "serve.log") as g:
        yield g


def test_ragbus_serve_answers_431_past_the_default_head_limit(limited):
    with connect(limited.port) as s:
        s.sendall(head(60 * 1024, "/health"))
        assert read_answer(s)[0] == 200
    with connect(limited.port) as s:
        send_until_answered(s, 100 * 1024, b"GET /health HTTP/1.1\r\nHost: x\r\nX-Big: ")
        status, body, _ = read_answer(s)
        assert status == 431 and b'"type":"HeadTooLarge"' in body


def test_unfinished_huge_heads_do_not_grow_the_server(limited):
    """Four clients each pushing 128 MB of one header that never ends, as fast as the server takes it."""
    before = rss_bytes(limited.process.pid)
    sockets = [connect(limited.port) for _ in range(4)]

    def attack(s: socket.socket) -> None:
        chunk = b"a" * (1024 ** 2)
        with contextlib.suppress(OSError):  # the server ends the connection: that is the point
            s.sendall(b"GET / HTTP/1.1\r\nHost: x\r\nX-Big: ")
            for _ in range(128):
                s.sendall(chunk)

    threads = [threading.Thread(target=attack, args=(s,)) for s in sockets]
    for t in threads:
        t.start()
    for t in threads:
        t.join(60)
    grown = rss_bytes(limited.process.pid) - before  # measured while every socket is still open on this side
    try:
        assert grown < 32 * 1024 ** 2, f"the server grew by {grown / 1024 ** 2:.0f} MB"
        assert all(closed(s) for s in sockets)
    finally:
        for s in sockets:
            s.close()


def test_two_hundred_slow_heads_are_all_closed(limited):
    """200 sockets sending a header line every 0.2 s: each is answered 408 and closed by the head timeout."""
    before = rss_bytes(limited.process.pid)
    sockets = [connect(limited.port) for _ in range(200)]
    try:
        for s in sockets:
            s.sendall(b"GET /health HTTP/1.1\r\nHost: x\r\n")
        open_ = set(sockets)
        answers: dict[socket.socket, bytes] = {s: b"" for s in sockets}
        started = time.monotonic()
        while open_:
            assert time.monotonic() - started < 3 * BOUND_S, f"{len(open_)} of 200 still open"
            readable, _, _ = select.select(list(open_), [], [], 0.2)
            for s in readable:
                try:
                    data = s.recv(65536)
                except ConnectionResetError:
                    data = b""
                answers[s] += data
                if not data:
                    open_.discard(s)
            for s in open_ - set(readable):
                with contextlib.suppress(OSError):
                    s.sendall(b"X-Slow: 1\r\n")
        assert all(a.startswith(b"HTTP/1.1 408 ") for a in answers.values())
        assert rss_bytes(limited.process.pid) - before < 32 * 1024 ** 2
    finally:
        for s in sockets:
            s.close()
