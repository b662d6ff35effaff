"""bqlock against a fake agent on a Unix socket: what a real agent cannot be
made to do on cue (go silent while a hold is held, break a connection in the
middle of an acquire), and the parts that need no agent. No cluster needed.

Run: python3 -m unittest discover -s clients/python/tests -v
"""

from __future__ import annotations

import json
import os
import queue
import shutil
import socket
import sys
import tempfile
import threading
import time
import unittest
from datetime import datetime, timedelta, timezone
from typing import Any, Callable, Dict, List, Optional

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), ".."))

import bqlock  # noqa: E402
from bqlock._util import parse_time  # noqa: E402
from bqlock.errors import from_body  # noqa: E402


def rfc3339(t: float) -> str:
    """t as the agent writes times: UTC, nine fractional digits."""
    dt = datetime.fromtimestamp(t, timezone.utc)
    return dt.strftime("%Y-%m-%dT%H:%M:%S.") + "%06d123Z" % dt.microsecond


def hold_view(name: str = "x", valid_for: Optional[float] = 5.0, **kw: Any) -> Dict[str, Any]:
    v: Dict[str, Any] = {
        "lock_id": "h_fakefakefakefakefake0",
        "kind": "lock",
        "name": name,
        "mode": "exclusive",
        "token": "7.00ff",
        "token_int": "129127208515966861567",
        "started": rfc3339(time.time()),
        "state": "held",
        "valid": valid_for is not None,
    }
    if valid_for is not None:
        v["valid_until"] = rfc3339(time.time() + valid_for)
    v.update(kw)
    return v


class Request:
    def __init__(self, method: str, path: str, headers: Dict[str, str], body: bytes, conn: socket.socket) -> None:
        self.method, self.path, self.headers, self.body, self.conn = method, path, headers, body, conn

    def json(self) -> Any:
        return json.loads(self.body) if self.body else None

    def answer(self, status: int, value: Any) -> None:
        b = json.dumps(value).encode() + b"\n"
        self.conn.sendall(
            b"HTTP/1.1 %d X\r\nContent-Type: application/json\r\nContent-Length: %d\r\nConnection: close\r\n\r\n"
            % (status, len(b))
            + b
        )

    def start_stream(self) -> None:
        self.conn.sendall(b"HTTP/1.1 200 OK\r\nContent-Type: application/x-ndjson\r\nTransfer-Encoding: chunked\r\n\r\n")

    def event(self, ev: Dict[str, Any]) -> None:
        b = json.dumps(ev).encode() + b"\n"
        self.conn.sendall(b"%x\r\n%s\r\n" % (len(b), b))

    def closed_by_peer(self, within: float) -> bool:
        """Whether the client closed the connection within the time."""
        self.conn.settimeout(within)
        try:
            return self.conn.recv(1) == b""
        except socket.timeout:
            return False
        except OSError:
            return True


class FakeAgent:
    """An HTTP server on a Unix socket; each request goes to handle (in a thread of its own)."""

    def __init__(self, handle: Callable[[Request], None]) -> None:
        self.dir = tempfile.mkdtemp(prefix="bqfake")
        self.path = os.path.join(self.dir, "agent.sock")
        self.handle = handle
        self.requests: "queue.Queue[Request]" = queue.Queue()
        self.srv = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
        self.srv.bind(self.path)
        self.srv.listen(16)
        self.conns: List[socket.socket] = []
        threading.Thread(target=self._serve, daemon=True).start()

    def _serve(self) -> None:
        while True:
            try:
                c, _ = self.srv.accept()
            except OSError:
                return
            self.conns.append(c)
            threading.Thread(target=self._one, args=(c,), daemon=True).start()

    def _one(self, c: socket.socket) -> None:
        f = c.makefile("rb")
        line = f.readline().decode()
        if not line:
            return
        method, path, _ = line.split(" ", 2)
        headers: Dict[str, str] = {}
        while True:
            h = f.readline().decode().strip()
            if not h:
                break
            k, v = h.split(":", 1)
            headers[k.strip().lower()] = v.strip()
        body = f.read(int(headers.get("content-length", "0")))
        r = Request(method, path, headers, body, c)
        self.requests.put(r)
        try:
            self.handle(r)
        except OSError:
            pass

    def close(self) -> None:
        self.srv.close()
        for c in self.conns:
            try:
                c.close()
            except OSError:
                pass
        shutil.rmtree(self.dir, ignore_errors=True)


class FakeAgentTest(unittest.TestCase):
    def fake(self, handle: Callable[[Request], None]) -> bqlock.Client:
        a = FakeAgent(handle)
        self.addCleanup(a.close)
        self.agent = a
        return bqlock.Client(socket=a.path, timeout=5)


class TestStreamHoldLoss(FakeAgentTest):
    def test_silent_agent_the_watchdog_sets_lost_at_valid_until(self) -> None:
        # A stopped agent says nothing: the hold is lost when the clock passes
        # the last valid_until it said, not later.
        ping, gone = threading.Event(), threading.Event()

        def handle(r: Request) -> None:
            r.start_stream()
            r.event({"event": "waiting"})
            r.event({"event": "acquired", "hold": hold_view(valid_for=0.6)})
            ping.wait(10)
            r.event({"event": "ping", "valid_until": rfc3339(time.time() + 0.8)})
            gone.wait(10)  # then silence, the connection open

        c = self.fake(handle)
        h = c.lock("x")
        self.addCleanup(gone.set)
        until = h.valid_until
        ping.set()
        self.assertTrue(h.lost.wait(5), "lost never set with the agent silent")
        t_lost = time.time()
        self.assertEqual(h.lost_reason, "valid_until_passed")
        assert h.valid_until is not None and until is not None
        self.assertGreater(h.valid_until, until, "the ping moved valid_until on")
        self.assertGreaterEqual(t_lost, h.valid_until.timestamp(), "not before valid_until")
        self.assertLess(t_lost, h.valid_until.timestamp() + 0.5, "soon after valid_until")
        self.assertFalse(h.is_valid())
        self.assertRaises(bqlock.Lost, h.check)
        self.assertFalse(h.release())  # no DELETE to a silent agent: only the stream closes
        self.assertEqual([r.method for r in list(self.agent.requests.queue)], ["POST"])

    def test_is_valid_is_false_once_valid_until_passed(self) -> None:
        # Between the watchdog's wake-ups, is_valid reads the clock itself.
        def handle(r: Request) -> None:
            r.start_stream()
            r.event({"event": "acquired", "hold": hold_view(valid_for=0.3)})
            r.closed_by_peer(10)

        h = self.fake(handle).lock("x")
        self.assertTrue(h.is_valid())
        deadline = h.valid_until.timestamp() if h.valid_until else 0
        while time.time() < deadline:
            time.sleep(0.01)
        self.assertFalse(h.is_valid())
        h.release()

    def test_broken_stream_sets_lost(self) -> None:
        # A killed agent: the connection ends.
        def handle(r: Request) -> None:
            r.start_stream()
            r.event({"event": "acquired", "hold": hold_view(valid_for=30)})
            r.event({"event": "ping", "valid_until": rfc3339(time.time() + 30)})
            r.conn.shutdown(socket.SHUT_RDWR)
            r.conn.close()

        h = self.fake(handle).lock("x")
        self.assertTrue(h.lost.wait(5), "lost never set when the stream broke")
        self.assertEqual(h.lost_reason, "stream_broken")
        self.assertFalse(h.is_valid(), "valid_until is far, but the stream is gone")

    def test_agent_says_lost(self) -> None:
        def handle(r: Request) -> None:
            r.start_stream()
            r.event({"event": "acquired", "hold": hold_view(valid_for=30)})
            v = hold_view(valid_for=None, state="lost", reason="lease_lost", message="cut off")
            r.event({"event": "lost", "reason": "lease_lost", "message": "cut off", "hold": v})
            r.closed_by_peer(10)

        h = self.fake(handle).lock("x")
        self.assertTrue(h.lost.wait(5))
        self.assertEqual((h.lost_reason, h.lost_message, h.state), ("lease_lost", "cut off", "lost"))
        self.assertFalse(h.release())

    def test_release_closes_the_stream(self) -> None:
        closed: "queue.Queue[bool]" = queue.Queue()

        def handle(r: Request) -> None:
            if r.method == "DELETE":
                r.answer(200, hold_view(valid_for=None, state="released"))
                return
            r.start_stream()
            r.event({"event": "acquired", "hold": hold_view(valid_for=30)})
            closed.put(r.closed_by_peer(10))

        h = self.fake(handle).lock("x")
        self.assertTrue(h.release())
        self.assertTrue(closed.get(timeout=10), "the stream was not closed")
        self.assertEqual((h.lost_reason, h.state), ("released", "released"))
        reqs = list(self.agent.requests.queue)
        self.assertEqual([(r.method, r.path) for r in reqs], [("POST", "/v1/locks/x/hold"), ("DELETE", "/v1/holds/h_fakefakefakefakefake0")])
        self.assertEqual(reqs[0].json(), {"wait": 30.0, "ping": 1.0})

    def test_a_ping_too_long_for_the_guarantee_is_warned_of(self) -> None:
        def handle(r: Request) -> None:
            if r.method == "DELETE":
                r.answer(200, hold_view(valid_for=None, state="released"))
                return
            r.start_stream()
            r.event({"event": "acquired", "hold": hold_view(valid_for=1.2)})
            r.closed_by_peer(10)

        c = self.fake(handle)
        with self.assertLogs("bqlock", "WARNING") as logs:
            c.lock("x", ping=1).release()
        self.assertIn("ask for a shorter ping", logs.output[0])
        with self.assertRaises(AssertionError):  # (assertLogs fails when nothing was logged)
            with self.assertLogs("bqlock", "WARNING"):
                c.lock("x", ping=0.2).release()

    def test_waiting_stream_error_raises(self) -> None:
        def handle(r: Request) -> None:
            r.start_stream()
            r.event({"event": "waiting"})
            r.event({"event": "ping"})
            r.event({"event": "error", "error": {"code": "timeout", "message": "m", "waiting_for": "w"}})

        with self.assertRaises(bqlock.Timeout) as cm:
            self.fake(handle).lock("x", wait=1)
        self.assertEqual((cm.exception.status, cm.exception.waiting_for), (409, "w"))


class TestUnaryHold(FakeAgentTest):
    def test_wait_lost_with_a_silent_agent_ends_at_valid_until(self) -> None:
        gone = threading.Event()
        self.addCleanup(gone.set)

        def handle(r: Request) -> None:
            if r.method == "POST":
                r.answer(200, hold_view(valid_for=0.6))
            else:
                gone.wait(10)  # a stopped agent: no answer

        h = self.fake(handle).acquire("x")
        vu = h.valid_until
        assert vu is not None
        self.assertTrue(h.wait_lost(5), "wait_lost did not end when valid_until passed")
        t = time.time()
        self.assertGreaterEqual(t, vu.timestamp())
        self.assertLess(t, vu.timestamp() + 0.5)
        self.assertEqual((h.state, h.reason), ("lost", "valid_until_passed"))
        self.assertTrue(h.lost.is_set())
        self.assertFalse(h.is_valid(refresh=False))
        paths = [r.path.split("?")[0] for r in list(self.agent.requests.queue)]
        self.assertEqual(paths[0], "/v1/locks/x/acquire")
        self.assertTrue(all(p == "/v1/holds/h_fakefakefakefakefake0/wait" for p in paths[1:]) and len(paths) > 1, paths)


class TestAcquireRetry(FakeAgentTest):
    def test_a_broken_acquire_is_retried_with_its_request_id(self) -> None:
        calls: List[Dict[str, Any]] = []

        def handle(r: Request) -> None:
            calls.append(r.json())
            if len(calls) < 3:
                r.conn.shutdown(socket.SHUT_RDWR)  # the request is lost on its way back
                r.conn.close()
                return
            r.answer(200, hold_view(request_id=r.json().get("request_id")))

        h = self.fake(handle).acquire("x", wait=10, request_id="r-1")
        self.assertEqual(len(calls), 3)
        self.assertEqual([c.get("request_id") for c in calls], ["r-1"] * 3)
        self.assertEqual(h.request_id, "r-1")
        waits = [c["wait"] for c in calls]
        self.assertEqual(waits, sorted(waits, reverse=True), "each retry waits what is left")

    def test_without_a_request_id_nothing_is_retried(self) -> None:
        calls: List[Any] = []

        def handle(r: Request) -> None:
            calls.append(r.json())
            r.conn.shutdown(socket.SHUT_RDWR)
            r.conn.close()

        with self.assertRaises(bqlock.AgentUnreachable):
            self.fake(handle).acquire("x", wait=10)
        self.assertEqual(len(calls), 1)

    def test_retries_are_bounded(self) -> None:
        calls: List[Any] = []

        def handle(r: Request) -> None:
            calls.append(r.json())
            r.conn.shutdown(socket.SHUT_RDWR)
            r.conn.close()

        with self.assertRaises(bqlock.AgentUnreachable):
            self.fake(handle).acquire("x", request_id="r", retries=2)
        self.assertEqual(len(calls), 3)


class TestObserver(FakeAgentTest):
    def test_close_from_another_thread_ends_the_iteration(self) -> None:
        def handle(r: Request) -> None:
            r.start_stream()
            r.event({"event": "leader", "leader": {"client": "ab", "term": "1.ff", "term_int": "511", "rev": 1, "value": "v"}})
            r.closed_by_peer(10)

        obs = self.fake(handle).observe("e")
        got: List[bqlock.Leader] = []
        done = threading.Event()

        def watch() -> None:
            for ld in obs:
                got.append(ld)
            done.set()

        threading.Thread(target=watch, daemon=True).start()
        deadline = time.monotonic() + 5
        while not got and time.monotonic() < deadline:
            time.sleep(0.01)
        self.assertEqual(got, [bqlock.Leader(client="ab", term="1.ff", term_int=511, rev=1, value="v")])
        obs.close()
        self.assertTrue(done.wait(5), "the iteration did not end")


class TestPieces(unittest.TestCase):
    def test_parse_time(self) -> None:
        t = parse_time("2026-11-29T06:38:01.714858686Z")
        self.assertEqual(t, datetime(2026, 11, 29, 6, 38, 1, 714858, tzinfo=timezone.utc))
        self.assertEqual(parse_time("2026-11-29T06:38:01Z"), datetime(2026, 11, 29, 6, 38, 1, tzinfo=timezone.utc))
        self.assertEqual(
            parse_time("2026-11-29T08:38:01.5+02:00"), datetime(2026, 11, 29, 6, 38, 1, 500000, tzinfo=timezone.utc)
        )
        self.assertIsNone(parse_time(None))
        self.assertRaises(ValueError, parse_time, "yesterday")

    def test_errors_by_code(self) -> None:
        for code, cls, status in [
            ("bad_request", bqlock.BadRequest, 400),
            ("unauthorized", bqlock.Unauthorized, 401),
            ("not_permitted", bqlock.NotPermitted, 403),
            ("refused", bqlock.Refused, 403),
            ("not_found", bqlock.NotFound, 404),
            ("no_leader", bqlock.NoLeader, 404),
            ("busy", bqlock.Busy, 409),
            ("timeout", bqlock.Timeout, 409),
            ("conflict", bqlock.Conflict, 409),
            ("request_used", bqlock.RequestUsed, 410),
            ("lost", bqlock.Lost, 410),
            ("payload_too_large", bqlock.PayloadTooLarge, 413),
            ("too_many_requests", bqlock.TooManyRequests, 429),
            ("unavailable", bqlock.Unavailable, 503),
            ("agent_stopping", bqlock.AgentStopping, 503),
            ("internal", bqlock.InternalError, 500),
        ]:
            e = from_body({"error": {"code": code, "message": "m", "field": "f"}}, status)
            self.assertIs(type(e), cls)
            self.assertEqual((e.code, e.message, e.status, e.field), (code, "m", status, "f"))
            self.assertIsInstance(e, bqlock.BqError)
        e = from_body({"error": {"code": "new_code", "message": "m"}}, 418)
        self.assertIs(type(e), bqlock.BqError)
        self.assertEqual(e.code, "new_code")

    def test_durations(self) -> None:
        c = bqlock.Client(socket="/nonexistent")
        self.assertEqual(c._body(False, None, False, timedelta(seconds=1.5), 2), {"wait": 1.5, "ttl": 2.0})
        self.assertEqual(c._body(True, None, True, 5, None), {"mode": "shared", "try": True})
        self.assertEqual(c._body(False, 3, False, None, None), {"mode": "permits", "permits": 3})
        self.assertRaises(ValueError, c._body, True, 3, False, None, None)
        self.assertRaises(ValueError, c._body, False, None, False, -1, None)
        self.assertRaises(TypeError, c._body, False, None, False, "30s", None)


if __name__ == "__main__":
    unittest.main()
