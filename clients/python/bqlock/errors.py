"""The errors of the bq agent's API, one class per error ``code``.

Every error the agent answers is ``{"error": {"code", "message", ...}}`` with a
stable ``code`` (docs/agent.md, "Errors"); :func:`from_body` makes the
matching exception. Failures to reach the agent at all (no socket, the
connection broke, no answer in time) are :class:`AgentUnreachable`.
"""

from __future__ import annotations

from typing import Any, Dict, Optional, Type

__all__ = [
    "BqError",
    "BadRequest",
    "Unauthorized",
    "NotPermitted",
    "Refused",
    "NotFound",
    "NoLeader",
    "NotAcquired",
    "Busy",
    "Timeout",
    "Conflict",
    "RequestUsed",
    "Lost",
    "PayloadTooLarge",
    "TooManyRequests",
    "Unavailable",
    "AgentStopping",
    "InternalError",
    "AgentUnreachable",
    "from_body",
]


class BqError(Exception):
    """An error of the agent's API.

    Attributes:
        code: the API's stable error code (``"busy"``, ``"timeout"``, ...).
        message: a sentence a person understands.
        status: the HTTP status of the answer (None when there was none).
        field: for a bad request, the request field at fault.
        waiting_for: for a timed-out wait, what it waited for (holder, token).
        hold: for ``lost`` and ``request_used``, the hold (a dict) and how it ended.
    """

    #: The code of this class of error; a subclass sets its own.
    default_code = ""

    def __init__(
        self,
        message: str,
        code: Optional[str] = None,
        status: Optional[int] = None,
        field: Optional[str] = None,
        waiting_for: Optional[str] = None,
        hold: Optional[Dict[str, Any]] = None,
    ) -> None:
        super().__init__(message)
        self.code: str = code or self.default_code
        self.message: str = message
        self.status: Optional[int] = status
        self.field: Optional[str] = field
        self.waiting_for: Optional[str] = waiting_for
        self.hold: Optional[Dict[str, Any]] = hold

    def __str__(self) -> str:
        s = "%s: %s" % (self.code, self.message) if self.code else self.message
        if self.field:
            s += " [field %s]" % self.field
        return s


class BadRequest(BqError):
    """``bad_request``: a field, the body or the path is wrong (``field`` names it)."""

    default_code = "bad_request"


class Unauthorized(BqError):
    """``unauthorized``: a TCP request without the agent's bearer token, or a wrong one."""

    default_code = "unauthorized"


class NotPermitted(BqError):
    """``not_permitted``: a closed cluster does not let this identity (or not this name)."""

    default_code = "not_permitted"


class Refused(BqError):
    """``refused``: the servers refused it for what it asks (a bound, a ban); retrying does not help."""

    default_code = "refused"


class NotFound(BqError):
    """``not_found``: no hold of that lock_id (never taken, forgotten, or the agent restarted)."""

    default_code = "not_found"


class NoLeader(BqError):
    """``no_leader``: the election has no leader."""

    default_code = "no_leader"


class NotAcquired(BqError):
    """The lock was not taken because someone else has it: :class:`Busy` or :class:`Timeout`."""


class Busy(NotAcquired):
    """``busy``: a try found someone ahead (or another caller of this agent holds or waits for the name)."""

    default_code = "busy"


class Timeout(NotAcquired):
    """``timeout``: the wait passed with the lock held by another (``waiting_for`` says by whom)."""

    default_code = "timeout"


class Conflict(BqError):
    """``conflict``: a request_id reused with other parameters."""

    default_code = "conflict"


class RequestUsed(BqError):
    """``request_used``: the request_id's hold ended; ``hold`` says how."""

    default_code = "request_used"


class Lost(BqError):
    """``lost``: the hold was lost (``hold`` says why); work done under it may have overlapped the next holder's."""

    default_code = "lost"


class PayloadTooLarge(BqError):
    """``payload_too_large``: a request body over 64 KiB."""

    default_code = "payload_too_large"


class TooManyRequests(BqError):
    """``too_many_requests``: a bound of the agent (streams, holds, watches, connections)."""

    default_code = "too_many_requests"


class Unavailable(BqError):
    """``unavailable``: fewer than a quorum of servers answer."""

    default_code = "unavailable"


class AgentStopping(BqError):
    """``agent_stopping``: the agent is shutting down."""

    default_code = "agent_stopping"


class InternalError(BqError):
    """``internal``: a bug of the agent; the message says what."""

    default_code = "internal"


class AgentUnreachable(BqError, ConnectionError):
    """The agent could not be reached, or stopped answering: no socket, a refused or
    broken connection, no answer in time. Also a :class:`ConnectionError`."""

    default_code = "agent_unreachable"
    #: True when the agent did not answer in time (rather than the connection failing).
    timed_out = False


_BY_CODE: Dict[str, Type[BqError]] = {
    c.default_code: c
    for c in (
        BadRequest,
        Unauthorized,
        NotPermitted,
        Refused,
        NotFound,
        NoLeader,
        Busy,
        Timeout,
        Conflict,
        RequestUsed,
        Lost,
        PayloadTooLarge,
        TooManyRequests,
        Unavailable,
        AgentStopping,
        InternalError,
    )
}


# Each code's HTTP status (docs/agent.md, "Errors"): an error said in a
# stream (whose answer was 200) gets the status it has in a plain answer.
_STATUS: Dict[str, int] = {
    "bad_request": 400,
    "unauthorized": 401,
    "not_permitted": 403,
    "refused": 403,
    "not_found": 404,
    "no_leader": 404,
    "busy": 409,
    "timeout": 409,
    "conflict": 409,
    "request_used": 410,
    "lost": 410,
    "payload_too_large": 413,
    "too_many_requests": 429,
    "unavailable": 503,
    "agent_stopping": 503,
    "internal": 500,
}


def from_error(err: Dict[str, Any], status: Optional[int] = None) -> BqError:
    """The exception for the API's error object ``err`` (the value of ``"error"``);
    ``status`` is the answer's HTTP status (None: the code's)."""
    code = str(err.get("code") or "")
    cls = _BY_CODE.get(code, BqError)
    if status is None:
        status = _STATUS.get(code)
    return cls(
        str(err.get("message") or code or "error"),
        code=code or None,
        status=status,
        field=err.get("field") or None,
        waiting_for=err.get("waiting_for") or None,
        hold=err.get("hold"),
    )


def from_body(body: Any, status: Optional[int]) -> BqError:
    """The exception for an error answer's JSON ``body`` (``{"error": {...}}``)."""
    if isinstance(body, dict) and isinstance(body.get("error"), dict):
        return from_error(body["error"], status)
    return BqError("unexpected answer (HTTP %s): %.200r" % (status, body), code="", status=status)
