"""HTTP/JSON to the agent over a Unix socket or loopback TCP, with http.client.

Every request has a connection of its own: the agent is local, connections
are cheap, and a Client is then safe to share between threads.
"""

from __future__ import annotations

import http.client
import json
import socket
import threading
from typing import Any, Dict, Optional, Tuple

from .errors import AgentUnreachable, BqError, from_body


class UnixHTTPConnection(http.client.HTTPConnection):
    """An HTTPConnection to a Unix socket (the Host header says ``localhost``)."""

    def __init__(self, path: str, timeout: Optional[float] = None) -> None:
        super().__init__("localhost", timeout=timeout)
        self.socket_path = path

    def connect(self) -> None:
        s = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
        try:
            s.settimeout(self.timeout)
            s.connect(self.socket_path)
        except BaseException:
            s.close()
            raise
        self.sock = s


def unreachable(where: str, err: BaseException, what: str) -> AgentUnreachable:
    """The AgentUnreachable for a failure of the transport."""
    if isinstance(err, socket.timeout):  # (TimeoutError from Python 3.10 on)
        e = AgentUnreachable("%s: no answer from the agent at %s in time" % (what, where))
        e.timed_out = True
        return e
    if isinstance(err, FileNotFoundError):
        msg = "%s: no agent at %s: the socket does not exist (is `bqclient agent` running?)" % (what, where)
    elif isinstance(err, ConnectionRefusedError):
        msg = "%s: the agent at %s refused the connection (is `bqclient agent` running?)" % (what, where)
    elif isinstance(err, PermissionError):
        msg = "%s: may not open the agent's socket %s (its mode lets only its user, or --socket-group)" % (what, where)
    else:
        msg = "%s: the connection to the agent at %s failed: %s" % (what, where, err or type(err).__name__)
    e = AgentUnreachable(msg)
    return e


# What a failing transport raises: socket errors (socket.timeout is an
# OSError) and http.client's (RemoteDisconnected, IncompleteRead, ...).
TRANSPORT_ERRORS = (OSError, http.client.HTTPException)


class Transport:
    """Where the agent is, and how to ask it."""

    def __init__(
        self,
        socket_path: Optional[str] = None,
        host: Optional[str] = None,
        port: Optional[int] = None,
        token: Optional[str] = None,
    ) -> None:
        self.socket_path = socket_path
        self.host = host
        self.port = port
        self.token = token
        self.where = socket_path if socket_path else "http://%s:%s" % (host, port)

    def connection(self, timeout: Optional[float]) -> http.client.HTTPConnection:
        if self.socket_path:
            return UnixHTTPConnection(self.socket_path, timeout=timeout)
        return http.client.HTTPConnection(self.host or "127.0.0.1", self.port, timeout=timeout)

    def headers(self, body: Optional[bytes]) -> Dict[str, str]:
        h = {"Accept": "application/json"}
        if body is not None:
            h["Content-Type"] = "application/json"
        if self.token:
            h["Authorization"] = "Bearer " + self.token
        return h

    def request(
        self,
        method: str,
        path: str,
        body: Optional[Dict[str, Any]] = None,
        timeout: Optional[float] = None,
        accept: Tuple[int, ...] = (),
    ) -> Tuple[int, Any]:
        """Send one request and read its JSON answer: (status, value).

        A status of 400 and above raises the matching BqError, unless it is
        in ``accept``. A failure to reach the agent, or no answer within
        ``timeout`` seconds (None: no bound), raises AgentUnreachable.
        """
        what = "%s %s" % (method, path.split("?")[0])
        data = None if body is None else json.dumps(body).encode()
        conn = self.connection(timeout)
        try:
            conn.request(method, path, body=data, headers=self.headers(data))
            resp = conn.getresponse()
            raw = resp.read()
            status = resp.status
        except TRANSPORT_ERRORS as err:
            raise unreachable(self.where, err, what) from err
        finally:
            conn.close()
        try:
            value = json.loads(raw.decode("utf-8")) if raw.strip() else None
        except ValueError:
            raise BqError("%s: the agent answered HTTP %d with no JSON: %.200r" % (what, status, raw), status=status)
        if status >= 400 and status not in accept:
            raise from_body(value, status)
        return status, value

    def stream(
        self,
        method: str,
        path: str,
        body: Optional[Dict[str, Any]],
        timeout: Optional[float],
    ) -> "Stream":
        """Open a stream of newline-delimited JSON events. An error answer
        (before the stream starts) raises the matching BqError."""
        what = "%s %s" % (method, path.split("?")[0])
        data = None if body is None else json.dumps(body).encode()
        conn = self.connection(timeout)
        try:
            conn.connect()
            sock = conn.sock
            conn.request(method, path, body=data, headers=self.headers(data))
            resp = conn.getresponse()
        except TRANSPORT_ERRORS as err:
            conn.close()
            raise unreachable(self.where, err, what) from err
        except BaseException:
            conn.close()
            raise
        if resp.status != 200:
            try:
                raw = resp.read()
            except TRANSPORT_ERRORS as err:
                raise unreachable(self.where, err, what) from err
            finally:
                conn.close()
            try:
                value = json.loads(raw.decode("utf-8"))
            except ValueError:
                value = raw
            raise from_body(value, resp.status)
        return Stream(self.where, what, conn, sock, resp)


class Stream:
    """An open stream of events (one JSON object a line) from the agent.

    One thread reads it (next_event); any thread may close it. Closing shuts
    the socket down, which wakes the reader; the connection's objects are
    closed by whichever of the two comes last (http.client's response must
    not be closed under a thread reading it).
    """

    def __init__(
        self,
        where: str,
        what: str,
        conn: http.client.HTTPConnection,
        sock: socket.socket,
        resp: http.client.HTTPResponse,
    ) -> None:
        self.where = where
        self.what = what
        self._conn = conn
        self._sock = sock
        self._resp = resp
        self._mu = threading.Lock()
        self._closed = False
        self._reading = False
        self._freed = False

    @property
    def closed(self) -> bool:
        """Whether close was called (not whether the agent ended the stream)."""
        return self._closed

    def set_timeout(self, timeout: Optional[float]) -> None:
        """Bound each read: no event within ``timeout`` seconds raises AgentUnreachable."""
        self._sock.settimeout(timeout)

    def next_event(self) -> Optional[Dict[str, Any]]:
        """The next event, or None when the stream ended (or was closed here)."""
        with self._mu:
            if self._closed:
                return None
            self._reading = True
        try:
            line = self._resp.readline()
        except TRANSPORT_ERRORS as err:
            if self._closed:
                return None
            raise unreachable(self.where, err, self.what) from err
        except ValueError:  # read from a closed file
            if self._closed:
                return None
            raise
        finally:
            with self._mu:
                self._reading = False
                if self._closed:
                    self._free()
        if not line:
            return None
        try:
            ev = json.loads(line.decode("utf-8"))
        except ValueError:
            raise BqError("%s: the agent sent a line that is not JSON: %.200r" % (self.what, line))
        if not isinstance(ev, dict):
            raise BqError("%s: the agent sent an event that is not an object: %.200r" % (self.what, line))
        return ev

    def close(self) -> None:
        """Close the stream (the agent sees it closed); a thread blocked reading it
        wakes up and sees its end."""
        with self._mu:
            if self._closed:
                return
            self._closed = True
            try:
                # shutdown, not close: close does not wake a thread blocked
                # in recv on this socket, and the connection ends only once
                # every reference to its file is gone.
                self._sock.shutdown(socket.SHUT_RDWR)
            except OSError:
                pass
            if not self._reading:
                self._free()

    def _free(self) -> None:
        if self._freed:
            return
        self._freed = True
        for c in (self._resp, self._conn, self._sock):
            try:
                c.close()
            except Exception:
                pass
