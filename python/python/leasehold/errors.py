"""Exceptions, sorted by what the caller should do.

Every error the client raises is a :class:`LeaseholdError`; its subclass
says what to do next, as the Rust client's ``Remedy`` does::

    try:
        client.put("svc/db", b"10.0.0.5", cas=stat.modify_index)
    except leasehold.Conflict:
        ...  # someone wrote first: read, then decide
    except leasehold.OutcomeUnknown:
        ...  # it may have been written: read before writing again
"""

from typing import Optional

__all__ = [
    "LeaseholdError",
    "RetryableError",
    "Unavailable",
    "LockBusy",
    "Conflict",
    "OutcomeUnknown",
    "SessionExpired",
    "NotAuthorized",
    "RequestRefused",
    "Timeout",
]


class LeaseholdError(Exception):
    """Every error the Leasehold client raises."""


class RetryableError(LeaseholdError):
    """Nothing was done: the same request may be sent again.

    ``retry_after`` is how many seconds to wait first when the master said
    (a fail-over, congestion), else ``None``: back off and try again.
    """

    def __init__(self, message: str, retry_after: Optional[float] = None) -> None:
        super().__init__(message)
        self.retry_after = retry_after


class Unavailable(RetryableError):
    """The master could not be reached: try again, on another connection or member."""


class LockBusy(RetryableError):
    """Someone else holds the lock, or it is in lock-delay.

    ``lock_delay_left`` is the seconds of lock-delay left (the lock's last
    holder vanished without releasing it), else ``None``.
    """

    def __init__(self, message: str, lock_delay_left: Optional[float] = None) -> None:
        super().__init__(message, retry_after=lock_delay_left)
        self.lock_delay_left = lock_delay_left


class Conflict(LeaseholdError):
    """The request lost a race (compare-and-set): read the current state, then decide."""


class OutcomeUnknown(LeaseholdError):
    """It may or may not have been carried out: find out before repeating one that is not idempotent."""


class SessionExpired(LeaseholdError):
    """The session is gone, and what relied on it may be someone else's now: start a new one."""


class NotAuthorized(LeaseholdError):
    """This client's principal lacks the right; repeating it will not help."""


class RequestRefused(LeaseholdError):
    """The request is wrong or not allowed, and stays so: do not repeat it."""


class Timeout(LeaseholdError, TimeoutError):
    """A blocking call's ``timeout`` ran out; what it started was undone (a lock wait withdrawn)."""
