"""bqlock: bq's Byzantine-fault-tolerant locks from Python, through the local agent.

``bqclient agent`` holds one client identity and serves its locks over
HTTP/JSON on a Unix socket (docs/agent.md); this package is its client, with
the standard library only::

    import bqlock

    client = bqlock.Client()  # the agent at $BQ_AGENT_SOCKET (or socket=..., or url=... with a token)
    with client.lock("deploy", wait=30) as hold:        # Timeout if another holds it for 30 s
        for step in plan:
            hold.check()                                 # raises Lost once the hold may be lost
            storage.write(step, fence=hold.token_int)    # the resource refuses tokens below the highest seen
    # leaving the block released it

    if (h := client.try_lock("cron")) is not None:       # None if busy
        with h: run_cron()

Holds held by a stream (:meth:`Client.lock`, :meth:`Client.try_lock`,
:meth:`Client.campaign`) set ``hold.lost`` when the agent says the hold is
lost, when the stream breaks (the agent died), or when the clock passes the
last ``valid_until`` the agent said (a stopped agent says nothing). Holds
taken by :meth:`Client.acquire` need no connection and can be retried
safely with a ``request_id``. Errors are :class:`BqError` subclasses, one per
error code of the API (:class:`Busy`, :class:`Timeout`, :class:`Lost`, ...).
"""

import logging as _logging

from .client import Client, Leader, LockStatus, Observer, Participant, Semaphore
from .errors import (
    AgentStopping,
    AgentUnreachable,
    BadRequest,
    BqError,
    Busy,
    Conflict,
    InternalError,
    Lost,
    NoLeader,
    NotAcquired,
    NotFound,
    NotPermitted,
    PayloadTooLarge,
    Refused,
    RequestUsed,
    TooManyRequests,
    Timeout,
    Unauthorized,
    Unavailable,
)
from .errors import __all__ as _error_names
from .holds import Hold, HoldInfo, Leadership, StreamHold

__version__ = "0.1.0"

# A library logs only where its user asks (logging.getLogger("bqlock")).
_logging.getLogger("bqlock").addHandler(_logging.NullHandler())

__all__ = [
    "Client",
    "Semaphore",
    "Leader",
    "Observer",
    "LockStatus",
    "Participant",
    "HoldInfo",
    "StreamHold",
    "Leadership",
    "Hold",
]
# Every error class, as errors.py lists them (from_body stays inside).
__all__ += [_n for _n in _error_names if _n != "from_body"]
