"""Holds: a lock (or an election's lead) held through the agent.

* :class:`StreamHold` is held by an open stream (``POST /v1/locks/{name}/hold``):
  a background thread reads the agent's events, and a watchdog holds the
  agent to the last ``valid_until`` it said. Closing it releases the lock.
* :class:`Leadership` is an election's lead, held the same way.
* :class:`Hold` is held without a connection (``POST .../acquire``), until
  :meth:`Hold.release`, its ``ttl``, a loss, or the agent stopping.
"""

from __future__ import annotations

import logging
import threading
import time
from datetime import datetime
from typing import TYPE_CHECKING, Any, Dict, Optional
from urllib.parse import quote

from ._transport import Stream
from ._util import Duration, parse_time, seconds
from .errors import AgentUnreachable, BqError, Lost, NotFound, from_error

if TYPE_CHECKING:  # pragma: no cover
    from .client import Client

__all__ = ["HoldInfo", "StreamHold", "Leadership", "Hold"]

log = logging.getLogger("bqlock")

# Why a hold is no longer held, beyond the agent's own reasons (lease_lost,
# max_hold, revoked, expired, agent_stopping):
RELEASED = "released"  # released (by this hold's release(), or by its lock_id elsewhere)
VALID_UNTIL_PASSED = "valid_until_passed"  # the local clock passed the last valid_until the agent said
STREAM_BROKEN = "stream_broken"  # the stream ended or failed: the agent died, or the connection broke
EXPIRED = "expired"  # its ttl ran out (the agent's reason too)
NOT_FOUND = "not_found"  # the agent does not know the hold (it restarted, or forgot it)


class HoldInfo:
    """What the agent says of a hold (its ``HoldView``), as attributes.

    Attributes:
        lock_id: the hold's secret name; it is what releases the hold.
        kind: ``"lock"``, or ``"leadership"`` for an election's lead.
        name: the lock's name.
        mode: ``"exclusive"``, ``"shared"`` or ``"permits"``.
        permits: with mode ``"permits"``, how many (else None).
        token: the fencing token, ``"N.T"``.
        token_int: the fencing token as one integer; it grows from each holder to the next.
        started: when the hold began.
        expires: when its ``ttl`` ends it, if one was given.
        request_id: the acquire's request_id, if any.
        state: ``"held"``, ``"lost"`` or ``"released"``, as last heard.
        valid_until: until when the hold is guaranteed, as last heard (None: not at all).
        reason, message: why it was lost, once it was.
    """

    def __init__(self, view: Dict[str, Any]) -> None:
        self.lock_id: str = view["lock_id"]
        self.kind: str = view.get("kind", "lock")
        self.name: str = view["name"]
        self.mode: str = view.get("mode", "exclusive")
        self.permits: Optional[int] = view.get("permits") or None
        self.token: str = view["token"]
        self.token_int: int = int(view["token_int"])
        self.started: Optional[datetime] = parse_time(view.get("started"))
        self.expires: Optional[datetime] = parse_time(view.get("expires"))
        self.request_id: Optional[str] = view.get("request_id") or None
        self.state: str = "held"
        self.valid_until: Optional[datetime] = None
        self.reason: Optional[str] = None
        self.message: Optional[str] = None
        self._until: float = 0.0  # valid_until as a time.time() instant; 0: not valid
        self._update(view)

    def _update(self, view: Dict[str, Any]) -> None:
        """Take in a newer view of the hold."""
        self.state = view.get("state", self.state)
        self.reason = view.get("reason") or self.reason
        self.message = view.get("message") or self.message
        if view.get("valid") and view.get("valid_until"):
            self._set_valid_until(view["valid_until"])
        else:
            self.valid_until, self._until = None, 0.0

    def _set_valid_until(self, s: str) -> None:
        vu = parse_time(s)
        assert vu is not None
        self.valid_until, self._until = vu, vu.timestamp()

    def time_left(self) -> float:
        """Seconds until the last ``valid_until`` heard (0 once it passed, or if none)."""
        return max(0.0, self._until - time.time())

    def _path(self) -> str:
        return "/v1/holds/" + quote(self.lock_id, safe="")

    def __repr__(self) -> str:
        return "<%s %r %s token=%s lock_id=%s…>" % (
            type(self).__name__,
            self.name,
            self.state,
            self.token,
            self.lock_id[:6],
        )


class StreamHold(HoldInfo):
    """A lock held by an open stream to the agent (from :meth:`Client.lock`).

    A background thread reads the agent's events: pings move ``valid_until``
    on; ``lost`` and ``released`` end the hold. :attr:`lost` is set when the
    agent says the hold is lost or released, when the stream breaks (the
    agent died), or when the local clock passes the last ``valid_until`` the
    agent said — the agent and this process share a clock, so a stopped or
    stuck agent, which says nothing, cannot keep a caller working past its
    guarantee. Once :attr:`lost` is set, stop the work done under the lock,
    then :meth:`release` it (or leave the ``with`` block).

    Use it as a context manager: leaving the block releases the lock.

    Attributes:
        lost: a :class:`threading.Event`, set once the hold may no longer be held.
        lost_reason: why: the agent's reason (``lease_lost``, ``max_hold``,
            ``revoked``, ``expired``, ``agent_stopping``), or ``released``,
            ``stream_broken``, ``valid_until_passed``.
        lost_message: a sentence about it.
    """

    _first_event = "acquired"

    def __init__(
        self, client: "Client", stream: Stream, view: Dict[str, Any], silence: Optional[float], ping: float
    ) -> None:
        self._cond = threading.Condition()
        self.lost = threading.Event()
        self.lost_reason: Optional[str] = None
        self.lost_message: Optional[str] = None
        super().__init__(view)
        self._client = client
        self._stream = stream
        self._release_result: Optional[bool] = None
        self._releasing = threading.Lock()
        if self.state != "held" or not self._until:
            self._mark_lost(view.get("reason") or VALID_UNTIL_PASSED, "the agent said the hold is not valid")
        elif self.time_left() < 2 * ping and (self.expires is None or self.expires.timestamp() > self._until):
            # The guarantee reaches little further than the next ping or two:
            # valid_until may pass between pings, and the hold be taken as lost.
            log.warning(
                "hold of %r: the agent guarantees it %.2f s ahead, and pings every %.2f s: "
                "ask for a shorter ping (ping=), or run the agent with a longer --ttl",
                self.name,
                self.time_left(),
                ping,
            )
        stream.set_timeout(silence)
        self._reader = threading.Thread(target=self._read, name="bqlock-read-%s" % self.name, daemon=True)
        self._watchdog = threading.Thread(target=self._watch, name="bqlock-watch-%s" % self.name, daemon=True)
        self._reader.start()
        self._watchdog.start()

    # -- the state, as the caller sees it

    def is_valid(self) -> bool:
        """Whether the hold is guaranteed now: not lost, and the local clock
        before the last ``valid_until`` the agent said. Ask it before a write
        the resource cannot fence with :attr:`token_int`."""
        return not self.lost.is_set() and time.time() < self._until

    def check(self) -> None:
        """Raise :class:`~bqlock.errors.Lost` unless :meth:`is_valid`."""
        if not self.is_valid():
            reason = self.lost_reason or VALID_UNTIL_PASSED
            raise Lost(
                "the hold of %r is no longer guaranteed (%s)%s"
                % (self.name, reason, ": " + self.lost_message if self.lost_message else ""),
                hold={"lock_id": self.lock_id, "name": self.name, "state": self.state, "reason": reason},
            )

    # -- the threads

    def _mark_lost(self, reason: str, message: Optional[str] = None) -> None:
        """The hold ends, for reason: the first reason stands."""
        with self._cond:
            if self.lost.is_set():
                return
            self.lost_reason, self.lost_message = reason, message
            if self.state == "held":
                self.state = "released" if reason == RELEASED else "lost"
            self.lost.set()
            self._cond.notify_all()
        if reason != RELEASED:
            log.warning("hold of %r lost (%s)%s", self.name, reason, ": " + message if message else "")

    def _read(self) -> None:
        try:
            while True:
                ev = self._stream.next_event()
                if ev is None:
                    break
                self._on_event(ev)
            why = "the agent ended the stream"
        except BqError as e:
            why = str(e)
        except Exception as e:  # never let the thread die silently
            why = "reading the stream: %r" % (e,)
        if not self._stream.closed:
            self._mark_lost(STREAM_BROKEN, why)
            self._stream.close()  # (the agent releases the hold, if it still has it)

    def _on_event(self, ev: Dict[str, Any]) -> None:
        kind = ev.get("event")
        if kind == "ping":
            vu = ev.get("valid_until")
            if vu:
                with self._cond:
                    if not self.lost.is_set():
                        self._set_valid_until(vu)
                        self._cond.notify_all()
        elif kind in ("lost", "released"):
            view = ev.get("hold") or {}
            reason = ev.get("reason") or view.get("reason") or (RELEASED if kind == "released" else "lost")
            with self._cond:  # (held across both: the watchdog must not come between)
                if self.lost.is_set():
                    return
                if view:
                    self._update(view)
                self._mark_lost(reason, ev.get("message") or view.get("message"))
        elif kind == "error":
            err = from_error(ev.get("error") or {})
            self._mark_lost(err.code or "error", err.message)

    def _watch(self) -> None:
        with self._cond:
            while not self.lost.is_set():
                left = self._until - time.time()
                if left <= 0:
                    if self.expires is not None and self._until >= self.expires.timestamp():
                        # The agent's word will be the same, a moment later.
                        self._mark_lost(EXPIRED, "the hold's ttl ran out")
                    else:
                        self._mark_lost(
                            VALID_UNTIL_PASSED,
                            "the clock passed the hold's valid_until (%s) with no word of the agent since"
                            % (self.valid_until.isoformat() if self.valid_until else "none"),
                        )
                    return
                self._cond.wait(left)

    # -- releasing

    def _release_request(self) -> Any:
        return self._client._transport.request(
            "DELETE", self._path(), timeout=self._client.timeout, accept=(404, 410)
        )

    def release(self) -> bool:
        """Release the lock, and close the stream.

        While the hold is valid, the agent is asked to release it and answers
        once the servers applied it; then the stream is closed. Once it may be
        lost, the stream is only closed (which releases it at the agent).

        Returns True if the hold was held until this release, False if it had
        ended before (lost: see :attr:`lost_reason`; work done under it may
        have overlapped the next holder's). Releasing again returns the same.
        """
        with self._releasing:
            if self._release_result is not None:
                return self._release_result
            ok = False
            if self.is_valid():
                try:
                    status, body = self._release_request()
                except AgentUnreachable as e:
                    self._mark_lost(STREAM_BROKEN, str(e))
                else:
                    if status == 200:
                        ok = body.get("state") == "released"
                        with self._cond:  # (held across both: the watchdog must not come between)
                            if not self.lost.is_set():
                                self._update(body)
                            self._mark_lost(RELEASED)
                    elif status == 410:
                        err = from_error((body or {}).get("error") or {}, status)
                        view = err.hold or {}
                        self._mark_lost(view.get("reason") or "lost", view.get("message") or err.message)
                    else:
                        self._mark_lost(NOT_FOUND, from_error((body or {}).get("error") or {}, status).message)
            self._mark_lost(RELEASED)  # (if nothing ended it before)
            self._stream.close()
            self._release_result = ok
            return ok

    close = release

    def __enter__(self) -> "StreamHold":
        return self

    def __exit__(self, *exc: Any) -> None:
        self.release()


class Leadership(StreamHold):
    """An election's lead, held by an open campaign stream (from :meth:`Client.campaign`).

    It is a :class:`StreamHold`: :attr:`lost` says when the lead may have
    ended; leaving the ``with`` block (or :meth:`resign`) resigns.

    Attributes:
        value: the value this leader proclaims.
        term: the leader's term (its fencing token, ``"N.T"``); terms only grow.
        term_int: the term as one integer.
    """

    _first_event = "leader"

    def __init__(
        self, client: "Client", stream: Stream, view: Dict[str, Any], silence: Optional[float], ping: float
    ) -> None:
        self.value: str = view.get("value") or ""
        super().__init__(client, stream, view, silence, ping)

    def _update(self, view: Dict[str, Any]) -> None:
        super()._update(view)
        if view.get("value") is not None:
            self.value = view["value"]

    @property
    def term(self) -> str:
        return self.token

    @property
    def term_int(self) -> int:
        return self.token_int

    def _election_path(self, what: str) -> str:
        return "/v1/elections/%s/%s" % (quote(self.name, safe=""), what)

    def proclaim(self, value: str) -> None:
        """Make ``value`` the leader's value; returns once a quorum of servers keeps it.
        Raises :class:`~bqlock.errors.Lost` if the lead ended."""
        _, body = self._client._transport.request(
            "POST",
            self._election_path("proclaim"),
            {"lock_id": self.lock_id, "value": value},
            timeout=self._client.timeout,
        )
        self.value = value
        if isinstance(body, dict):
            with self._cond:
                self._update(body)

    def _release_request(self) -> Any:
        return self._client._transport.request(
            "POST",
            self._election_path("resign"),
            {"lock_id": self.lock_id},
            timeout=self._client.timeout,
            accept=(404, 410),
        )

    def resign(self) -> bool:
        """Resign the lead (as :meth:`release`): True if it was held until now."""
        return self.release()

    def __enter__(self) -> "Leadership":
        return self


class Hold(HoldInfo):
    """A lock held without a connection (from :meth:`Client.acquire`).

    It lasts until :meth:`release`, its ``ttl``, a loss, or the agent
    stopping; the agent keeps it alive meanwhile. Nothing here watches it:
    ask :meth:`is_valid` before a write, or keep :meth:`wait_lost` running in
    a thread. Use it as a context manager to release it when the block ends.

    Attributes:
        lost: a :class:`threading.Event` set once a call here learned that the
            hold ended (or that its ``valid_until`` passed): unlike a
            :class:`StreamHold`'s, it is set only by this object's calls.
    """

    def __init__(self, client: "Client", view: Dict[str, Any]) -> None:
        self.lost = threading.Event()
        super().__init__(view)
        self._client = client

    def _update(self, view: Dict[str, Any]) -> None:
        super()._update(view)
        if self.state != "held":
            self.lost.set()

    def refresh(self) -> "Hold":
        """Ask the agent about the hold (``GET /v1/holds/{lock_id}``) and take in its answer.
        Raises :class:`~bqlock.errors.NotFound` if the agent does not know it (any more)."""
        _, view = self._client._transport.request("GET", self._path(), timeout=self._client.timeout)
        self._update(view)
        return self

    def is_valid(self, refresh: bool = True) -> bool:
        """Whether the hold is guaranteed now: held, and the clock before its
        ``valid_until``. With ``refresh`` the agent is asked first; if it cannot
        be reached, the last ``valid_until`` heard still decides."""
        if refresh:
            try:
                self.refresh()
            except AgentUnreachable:
                pass
            except NotFound:
                self.state, self.reason = "lost", NOT_FOUND
                self.valid_until, self._until = None, 0.0
                self.lost.set()
                return False
        if self.state == "held" and time.time() >= self._until:
            self._passed()
        return self.state == "held"

    def _passed(self) -> None:
        """The clock passed the last valid_until heard: the hold may be lost."""
        if self.expires is not None and self._until >= self.expires.timestamp():
            self.reason, self.message = EXPIRED, "the hold's ttl ran out"
        else:
            self.reason = VALID_UNTIL_PASSED
            self.message = "the clock passed the hold's valid_until with no word of the agent since"
        self.state = "lost"
        self.valid_until, self._until = None, 0.0
        self.lost.set()

    def wait_lost(self, timeout: Optional[Duration] = None) -> bool:
        """Wait until the hold is no longer held, at most ``timeout`` seconds
        (None: for as long as it takes). Returns True once it ended — or may
        have: the clock passed its ``valid_until`` with the agent silent — and
        False when the timeout passed with it held.

        It long-polls ``GET /v1/holds/{lock_id}/wait``, each poll at most half
        the time left of the hold's guarantee, so that each answer moves
        ``valid_until`` on before it passes.
        """
        t = seconds(timeout, "timeout")
        deadline = None if t is None else time.monotonic() + t
        while True:
            if self.state != "held":
                self.lost.set()
                return True
            left = self._until - time.time()
            if left <= 0:
                self._passed()
                return True
            d = min(max(left / 2, 0.1), 600.0)
            if deadline is not None:
                rem = deadline - time.monotonic()
                if rem <= 0:
                    return False
                d = min(d, rem)
            try:
                _, view = self._client._transport.request(
                    "GET",
                    "%s/wait?wait=%.3f" % (self._path(), d),
                    timeout=min(d + self._client.timeout, max(left, 0.0) + 0.05),
                )
            except AgentUnreachable as e:
                if not e.timed_out:
                    raise
                continue  # the loop looks at the clock
            except NotFound:
                self.state, self.reason = "lost", NOT_FOUND
                self.valid_until, self._until = None, 0.0
                self.lost.set()
                return True
            self._update(view)

    def release(self) -> bool:
        """Release the hold (``DELETE /v1/holds/{lock_id}``); returns once the
        servers applied it. True if it was held until now; False if it had
        been lost before (:attr:`reason` says why: work done under it may
        have overlapped the next holder's) or the agent no longer knows it."""
        status, body = self._client._transport.request(
            "DELETE", self._path(), timeout=self._client.timeout, accept=(404, 410)
        )
        if status == 200:
            self._update(body)
            return True
        err = from_error((body or {}).get("error") or {}, status)
        if err.hold:
            self._update(err.hold)
        else:
            self.state, self.reason, self.message = "lost", NOT_FOUND, err.message
        self.valid_until, self._until = None, 0.0
        self.lost.set()
        return False

    def __enter__(self) -> "Hold":
        return self

    def __exit__(self, *exc: Any) -> None:
        self.release()
