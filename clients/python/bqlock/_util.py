"""Small helpers: the agent's timestamps and durations."""

from __future__ import annotations

import re
from datetime import datetime, timedelta, timezone
from typing import Optional, Union

Duration = Union[int, float, timedelta]

_RFC3339 = re.compile(
    r"^(\d{4})-(\d{2})-(\d{2})[Tt](\d{2}):(\d{2}):(\d{2})(?:\.(\d+))?([Zz]|[+-]\d{2}:\d{2})$"
)


def parse_time(s: Optional[str]) -> Optional[datetime]:
    """An RFC 3339 timestamp as the agent writes it (Go's, with up to nine
    fractional digits) as an aware datetime in UTC; None for None.

    Digits past the microsecond are cut, never rounded up: a ``valid_until``
    read so is never later than the agent's.
    """
    if s is None:
        return None
    m = _RFC3339.match(s)
    if not m:
        raise ValueError("not an RFC 3339 timestamp: %r" % (s,))
    year, month, day, hour, minute, second = (int(m.group(i)) for i in range(1, 7))
    frac = (m.group(7) or "")[:6].ljust(6, "0")
    tz = m.group(8)
    if tz in ("Z", "z"):
        offset = timedelta(0)
    else:
        sign = 1 if tz[0] == "+" else -1
        offset = sign * timedelta(hours=int(tz[1:3]), minutes=int(tz[4:6]))
    dt = datetime(year, month, day, hour, minute, second, int(frac), tzinfo=timezone(offset))
    return dt.astimezone(timezone.utc)


def seconds(d: Optional[Duration], what: str) -> Optional[float]:
    """A duration argument (seconds, or a timedelta) as seconds; None for None."""
    if d is None:
        return None
    if isinstance(d, timedelta):
        d = d.total_seconds()
    if isinstance(d, bool) or not isinstance(d, (int, float)):
        raise TypeError("%s: want seconds (a number) or a timedelta, got %r" % (what, d))
    if d < 0:
        raise ValueError("%s: %r is negative" % (what, d))
    return float(d)
