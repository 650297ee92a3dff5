"""The states of a session, as the client library models them."""

import enum

__all__ = ["SessionState"]


class SessionState(enum.Enum):
    """Where a session stands, as its client sees it.

    ``NORMAL``: the local lease is valid, locks can be relied on.
    ``JEOPARDY``: the local lease ran out without an answer; the master may
    or may not still hold the session, and the grace period runs. Stop
    acting on locks. ``SAFE``: contact came back within the grace period
    (``NORMAL`` follows at once). ``FAILOVER``: a new master took over
    while the lease was valid; locks survive, re-read what you cache
    (``NORMAL`` follows at once). ``EXPIRED``: the grace period ran out, or
    the master ended the session; final. ``CLOSED``: this client closed the
    session; final.
    """

    NORMAL = "normal"
    JEOPARDY = "jeopardy"
    SAFE = "safe"
    FAILOVER = "failover"
    EXPIRED = "expired"
    CLOSED = "closed"

    @property
    def is_final(self) -> bool:
        """Whether the session is over (expired or closed)."""
        return self in (SessionState.EXPIRED, SessionState.CLOSED)
