"""The client of one bq agent (``bqclient agent``)."""

from __future__ import annotations

import logging
import os
import time
from dataclasses import dataclass, field
from typing import Any, Dict, Iterator, List, Optional, Type, TypeVar
from urllib.parse import quote, urlencode, urlsplit

from ._transport import Stream, Transport
from ._util import Duration, seconds
from .errors import AgentUnreachable, Busy, NoLeader, from_error
from .holds import Hold, Leadership, StreamHold

__all__ = ["Client", "Semaphore", "Leader", "Observer", "LockStatus", "Participant"]

log = logging.getLogger("bqlock")

#: How often the client asks a stream's agent to say it is alive (seconds).
#: Keep it well under the agent's --ttl: each ping carries the hold's
#: valid_until, and a hold whose valid_until passes without a newer one is
#: taken as lost.
DEFAULT_PING = 1.0

_S = TypeVar("_S", bound=StreamHold)


def _q(name: str) -> str:
    if not isinstance(name, str):
        raise TypeError("a lock or election name is a str, not %r" % (type(name).__name__,))
    return quote(name, safe="")


@dataclass(frozen=True)
class Leader:
    """An election's leader, as f+1 of a quorum of servers hold it.

    Attributes:
        client: the leader's client id (hex).
        term: its term, the fencing token ``"N.T"``; terms only grow.
        term_int: the term as one integer.
        rev: how many times the leader proclaimed in this term.
        value: the value it proclaimed.
    """

    client: str
    term: str
    term_int: int
    rev: int
    value: str

    @classmethod
    def _of(cls, v: Dict[str, Any]) -> "Leader":
        return cls(
            client=v["client"],
            term=v["term"],
            term_int=int(v["term_int"]),
            rev=int(v.get("rev", 0)),
            value=v.get("value", ""),
        )


@dataclass(frozen=True)
class Participant:
    """A client in a lock's holders or queue.

    Attributes:
        client: its client id (hex); name: its enrolled name, when f+1 servers say the same.
        state: ``"holding"``, ``"waiting"`` (with a ticket) or ``"choosing a ticket"``
            (None from an agent that does not say); phase: the bakery's name of it.
        mode, permits, ticket, token, token_int: what it asked for, and its place.
        reported_by: how many servers reported it.
    """

    client: str
    phase: str
    mode: str
    ticket: int
    reported_by: int
    name: Optional[str] = None
    permits: Optional[int] = None
    token: Optional[str] = None
    token_int: Optional[int] = None
    state: Optional[str] = None

    @classmethod
    def _of(cls, v: Dict[str, Any]) -> "Participant":
        return cls(
            client=v["client"],
            phase=v.get("phase", ""),
            mode=v.get("mode", ""),
            ticket=int(v.get("ticket", 0)),
            reported_by=int(v.get("reported_by", 0)),
            name=v.get("name") or None,
            permits=v.get("permits") or None,
            token=v.get("token") or None,
            token_int=int(v["token_int"]) if v.get("token_int") else None,
            state=v.get("state") or None,
        )


@dataclass(frozen=True)
class LockStatus:
    """A lock's state as the agent's client combines the servers' (``GET /v1/locks/{name}``).

    Attributes:
        lock: the lock's name.
        index: grows each time the agent saw the state change; pass it to
            :meth:`Client.status` to wait for the next change. An index that
            went back (the agent restarted) means "start over".
        epoch: the cluster's epoch.
        servers: ``{"n", "f", "quorum", "reachable"}``.
        holders, queue: the holders, and the queue in the order it will enter.
        suspected, banned: ``{"client", "reported_by"}`` of clients some servers suspect or banned.
        raw: the answer as the agent gave it.
    """

    lock: str
    index: int
    epoch: int
    servers: Dict[str, int]
    holders: List[Participant]
    queue: List[Participant]
    suspected: List[Dict[str, Any]]
    banned: List[Dict[str, Any]]
    raw: Dict[str, Any] = field(repr=False)

    @classmethod
    def _of(cls, v: Dict[str, Any]) -> "LockStatus":
        return cls(
            lock=v["lock"],
            index=int(v["index"]),
            epoch=int(v.get("epoch", 0)),
            servers=dict(v.get("servers") or {}),
            holders=[Participant._of(p) for p in v.get("holders") or []],
            queue=[Participant._of(p) for p in v.get("queue") or []],
            suspected=list(v.get("suspected") or []),
            banned=list(v.get("banned") or []),
            raw=v,
        )


class Client:
    """A client of one bq agent: locks, semaphores, readers–writer locks and
    elections of the agent's identity, over HTTP/JSON.

    Where the agent is: ``socket`` (a Unix socket path), else ``url``
    (``"http://127.0.0.1:7480"``, the agent's ``--http``, with ``token`` or
    ``token_file``: its ``--token-file``), else the environment's
    ``BQ_AGENT_SOCKET``.

    ``timeout`` bounds each request that does not wait for a lock (seconds),
    and how long a stream may stay silent; ``ping`` is how often the agent is
    asked to say a stream is alive (keep it well under the agent's ``--ttl``).

    Each request has a connection of its own: a Client may be shared by
    threads. One identity holds a name once at a time: callers of one agent
    asking for one name queue in the agent (``try`` answers busy meanwhile).
    """

    def __init__(
        self,
        socket: Optional[str] = None,
        url: Optional[str] = None,
        token: Optional[str] = None,
        token_file: Optional[str] = None,
        timeout: float = 30.0,
        ping: float = DEFAULT_PING,
    ) -> None:
        if socket and url:
            raise ValueError("give the agent's socket or its url, not both")
        if token and token_file:
            raise ValueError("give token or token_file, not both")
        if token_file:
            with open(token_file, encoding="utf-8") as f:
                token = f.read().strip()
            if not token:
                raise ValueError("token_file %s is empty" % (token_file,))
        self.timeout = float(timeout)
        self.ping = float(ping)
        if url:
            u = urlsplit(url)
            if u.scheme != "http" or not u.hostname or u.path not in ("", "/"):
                raise ValueError("url %r: want http://HOST:PORT (the agent's --http)" % (url,))
            if not token:
                raise ValueError("url %r: the agent's TCP listener wants its bearer token: give token or token_file" % (url,))
            self._transport = Transport(host=u.hostname, port=u.port or 80, token=token)
        else:
            path = socket or os.environ.get("BQ_AGENT_SOCKET")
            if not path:
                raise ValueError(
                    "where is the agent? pass socket=PATH (the agent's Unix socket) or "
                    "url='http://127.0.0.1:PORT' with a token, or set BQ_AGENT_SOCKET"
                )
            self._transport = Transport(socket_path=path, token=token)

    @property
    def where(self) -> str:
        """The agent's address: its socket path or its URL."""
        return self._transport.where

    def __repr__(self) -> str:
        return "<bqlock.Client %s>" % (self.where,)

    # -- locks held by a stream

    def lock(
        self,
        name: str,
        shared: bool = False,
        permits: Optional[int] = None,
        wait: Optional[Duration] = 30,
        ttl: Optional[Duration] = None,
        ping: Optional[Duration] = None,
    ) -> StreamHold:
        """Take the lock ``name`` and hold it by a stream; use it in a ``with``.

        ``shared``: as a reader of a readers–writer lock (readers hold
        together, a writer alone). ``permits``: as one of ``permits`` permits
        of a semaphore (every holder names the same number). ``wait``: how
        long to wait (None: for as long as it takes). ``ttl``: the hold ends
        by itself after this long. ``ping``: how often the agent says the hold
        is alive (default the client's).

        Raises :class:`~bqlock.errors.Timeout` when the wait passes with the
        lock held by another, or another :class:`~bqlock.errors.BqError`.
        """
        hold = self._open(name, shared, permits, False, wait, ttl, ping)
        assert hold is not None
        return hold

    def try_lock(
        self,
        name: str,
        shared: bool = False,
        permits: Optional[int] = None,
        ttl: Optional[Duration] = None,
        ping: Optional[Duration] = None,
    ) -> Optional[StreamHold]:
        """Take the lock only if nobody is ahead: the hold, or None if busy."""
        return self._open(name, shared, permits, True, None, ttl, ping)

    def semaphore(self, name: str, permits: int) -> "Semaphore":
        """The semaphore ``name`` of ``permits`` permits (2 to 1024; every holder
        names the same number): ``with client.semaphore("s", 3).acquire() as hold``."""
        return Semaphore(self, name, permits)

    def _open(
        self,
        name: str,
        shared: bool,
        permits: Optional[int],
        try_: bool,
        wait: Optional[Duration],
        ttl: Optional[Duration],
        ping: Optional[Duration],
    ) -> Optional[StreamHold]:
        body = self._body(shared, permits, try_, wait, ttl)
        p = seconds(ping, "ping")
        body["ping"] = p if p is not None else self.ping
        return self._hold_stream("/v1/locks/%s/hold" % _q(name), body, StreamHold, try_)

    def _body(
        self,
        shared: bool,
        permits: Optional[int],
        try_: bool,
        wait: Optional[Duration],
        ttl: Optional[Duration],
    ) -> Dict[str, Any]:
        body: Dict[str, Any] = {}
        if shared and permits is not None:
            raise ValueError("shared or permits, not both")
        if shared:
            body["mode"] = "shared"
        elif permits is not None:
            body["mode"], body["permits"] = "permits", int(permits)
        if try_:
            body["try"] = True
        else:
            w = seconds(wait, "wait")
            if w is not None:
                body["wait"] = w
        t = seconds(ttl, "ttl")
        if t is not None:
            body["ttl"] = t
        return body

    def _silence(self, ping: float) -> float:
        """How long a stream may say nothing before the agent is taken as gone."""
        return max(self.timeout, 5 * ping + 1)

    def _hold_stream(self, path: str, body: Dict[str, Any], cls: Type[_S], try_: bool) -> Optional[_S]:
        stream = self._transport.stream("POST", path, body, timeout=self.timeout)
        ping = float(body.get("ping") or self.ping)
        silence = self._silence(ping)
        try:
            stream.set_timeout(silence)
            while True:
                ev = stream.next_event()
                if ev is None:
                    raise AgentUnreachable("%s: the agent ended the stream before answering" % (stream.what,))
                kind = ev.get("event")
                if kind == cls._first_event:
                    return cls(self, stream, ev["hold"], silence, ping)
                if kind == "error":
                    err = from_error(ev.get("error") or {})
                    if try_ and isinstance(err, Busy):
                        stream.close()
                        return None
                    raise err
                # "waiting", "ping": go on waiting
        except BaseException:
            stream.close()  # (the agent gives up the attempt)
            raise

    # -- locks held without a connection

    def acquire(
        self,
        name: str,
        wait: Optional[Duration] = None,
        try_: bool = False,
        ttl: Optional[Duration] = None,
        request_id: Optional[str] = None,
        shared: bool = False,
        permits: Optional[int] = None,
        attempt_timeout: Optional[Duration] = None,
        retries: int = 5,
    ) -> Hold:
        """Take the lock ``name`` and hold it without a connection, until
        :meth:`Hold.release` (or a ``with`` block's end), its ``ttl``, a loss,
        or the agent stopping. Arguments as for :meth:`lock`; ``wait=None``
        waits for as long as it takes. A caller that may crash without
        releasing should give a ``ttl``.

        With a ``request_id`` (up to 128 printable characters, new for each
        acquire) the acquire can be retried: when the request fails to reach
        the agent, its connection breaks, or no answer comes within
        ``attempt_timeout`` (or the wait plus the client's timeout), the
        client asks again with the same request_id, and the agent answers
        the hold that the first attempt took (same lock_id and token) rather
        than taking a second — up to ``retries`` failed connections, and
        for as long as the wait lasts. Without a request_id nothing is
        retried: the failure raises :class:`~bqlock.errors.AgentUnreachable`
        (and a hold taken as the caller went is released by the agent).
        """
        body = self._body(shared, permits, try_, None, ttl)
        if request_id is not None:
            body["request_id"] = request_id
        w = None if try_ else seconds(wait, "wait")
        at = seconds(attempt_timeout, "attempt_timeout")
        path = "/v1/locks/%s/acquire" % _q(name)
        start = time.monotonic()
        deadline = None if w is None else start + w
        failures = 0
        while True:
            timeout: Optional[float] = self.timeout if try_ else None
            if deadline is not None:
                left = max(0.0, deadline - time.monotonic())
                body["wait"] = round(left, 3)
                timeout = left + self.timeout
            if at is not None:
                timeout = at if timeout is None else min(timeout, at)
            try:
                _, view = self._transport.request("POST", path, body, timeout=timeout)
                return Hold(self, view)
            except AgentUnreachable as e:
                if request_id is None:
                    raise
                if not e.timed_out:
                    failures += 1
                    if failures > retries:
                        raise
                if deadline is not None and time.monotonic() >= deadline + self.timeout:
                    raise
                log.info("acquire of %r: %s; retrying with request_id %r", name, e, request_id)
                if not e.timed_out:
                    time.sleep(min(0.05 * 2 ** failures, 1.0))  # backoff: the agent may be restarting

    def hold(self, lock_id: str) -> Hold:
        """The hold of ``lock_id`` (one this program's acquire took, say before it
        restarted). Raises :class:`~bqlock.errors.NotFound` if the agent does not know it."""
        _, view = self._transport.request("GET", "/v1/holds/%s" % _q(lock_id), timeout=self.timeout)
        return Hold(self, view)

    # -- elections

    def campaign(
        self,
        name: str,
        value: str = "",
        wait: Optional[Duration] = None,
        ping: Optional[Duration] = None,
    ) -> Leadership:
        """Campaign in the election ``name`` and return once this caller leads
        (candidates lead in the order they campaigned), or raise
        :class:`~bqlock.errors.Timeout` when ``wait`` passes first. ``value``
        is what the leader proclaims. Leaving the ``with`` block resigns.
        (An election and the lock of the same name are one lock.)"""
        body: Dict[str, Any] = {"value": value}
        w = seconds(wait, "wait")
        if w is not None:
            body["wait"] = w
        p = seconds(ping, "ping")
        body["ping"] = p if p is not None else self.ping
        hold = self._hold_stream("/v1/elections/%s/campaign" % _q(name), body, Leadership, False)
        assert hold is not None
        return hold

    def leader(self, name: str) -> Optional[Leader]:
        """The leader of election ``name``, or None when it has none."""
        try:
            _, v = self._transport.request("GET", "/v1/elections/%s/leader" % _q(name), timeout=self.timeout)
        except NoLeader:
            return None
        return Leader._of(v)

    def observe(self, name: str, ping: Optional[Duration] = None) -> "Observer":
        """An iterator of the leaders of election ``name``: one each time the
        leader or its value changes (the first, the leader now, if any). Close
        it (or use it in a ``with``) to stop."""
        p = seconds(ping, "ping")
        p = self.ping if p is None else p
        stream = self._transport.stream(
            "GET", "/v1/elections/%s/observe?%s" % (_q(name), urlencode({"ping": p})), None, timeout=self.timeout
        )
        stream.set_timeout(self._silence(p))
        return Observer(stream)

    # -- status

    def status(self, name: str, index: Optional[int] = None, wait: Optional[Duration] = None) -> LockStatus:
        """The state of lock ``name``: holders, queue, suspected and banned
        clients. With ``index`` (a previous answer's), wait until the state's
        index is not that one, or ``wait`` passes (default 5 minutes, at most
        10), and answer then (with the same index if it did not change)."""
        q: Dict[str, Any] = {}
        w = seconds(wait, "wait")
        if index is not None:
            q["index"] = int(index)
            if w is not None:
                q["wait"] = w
        elif w is not None:
            raise ValueError("wait is for a status long poll: give the index of an earlier answer")
        path = "/v1/locks/%s" % _q(name)
        if q:
            path += "?" + urlencode(q)
        bound = self.timeout + (min(w if w is not None else 300.0, 600.0) if index is not None else 0.0)
        _, v = self._transport.request("GET", path, timeout=bound)
        return LockStatus._of(v)

    def health(self) -> Dict[str, Any]:
        """The agent's health: ``status`` is ``"ok"`` while it reaches a quorum of
        its servers (``"unavailable"`` or ``"stopping"`` otherwise), with
        ``client_id``, ``cluster``, ``epoch``, ``servers``, ``holds``, ``streams``, ``max_hold``."""
        _, v = self._transport.request("GET", "/v1/health", timeout=self.timeout, accept=(503,))
        return v


class Semaphore:
    """A semaphore of ``permits`` permits: each holder holds one of them.

    One identity holds a name once: permits held at once need as many
    identities (agents).
    """

    def __init__(self, client: Client, name: str, permits: int) -> None:
        self.client = client
        self.name = name
        self.permits = permits

    def acquire(
        self, wait: Optional[Duration] = 30, ttl: Optional[Duration] = None, ping: Optional[Duration] = None
    ) -> StreamHold:
        """Take a permit, held by a stream (as :meth:`Client.lock`)."""
        return self.client.lock(self.name, permits=self.permits, wait=wait, ttl=ttl, ping=ping)

    def try_acquire(self, ttl: Optional[Duration] = None, ping: Optional[Duration] = None) -> Optional[StreamHold]:
        """Take a permit if one is free now: the hold, or None."""
        return self.client.try_lock(self.name, permits=self.permits, ttl=ttl, ping=ping)

    def __repr__(self) -> str:
        return "<bqlock.Semaphore %r of %d>" % (self.name, self.permits)


class Observer:
    """The leaders of an election, as they change (from :meth:`Client.observe`).

    Iterating yields a :class:`Leader` each time the leader or its value
    changes; it ends when :meth:`close` is called (from any thread). If the
    agent ends the stream, the iteration raises
    :class:`~bqlock.errors.AgentUnreachable` (or the agent's error, such as
    :class:`~bqlock.errors.AgentStopping`).
    """

    def __init__(self, stream: Stream) -> None:
        self._stream = stream

    def __iter__(self) -> Iterator[Leader]:
        return self

    def __next__(self) -> Leader:
        while True:
            try:
                ev = self._stream.next_event()
            except BaseException:
                self._stream.close()
                raise
            if ev is None:
                if self._stream.closed:
                    raise StopIteration
                self._stream.close()
                raise AgentUnreachable("%s: the agent ended the stream" % (self._stream.what,))
            kind = ev.get("event")
            if kind == "leader" and ev.get("leader"):
                return Leader._of(ev["leader"])
            if kind == "error":
                self._stream.close()
                raise from_error(ev.get("error") or {})

    def close(self) -> None:
        """Stop observing; an iteration blocked in another thread ends."""
        self._stream.close()

    def __enter__(self) -> "Observer":
        return self

    def __exit__(self, *exc: Any) -> None:
        self.close()
