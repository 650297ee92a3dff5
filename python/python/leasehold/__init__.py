"""Leasehold for Python: Chubby-style sessions, locks and elections.

A binding over the Rust client library, so Python gets the session machine
(normal, jeopardy with a grace period, safe, failover, expired), the lock
guards and the consistent cache that Leasehold's simulations check::

    import leasehold

    with leasehold.Client.connect("127.0.0.1:7171") as client:
        with client.session("worker-1", lease=12.0) as session:
            session.on_state_change(lambda state: print("session", state))
            with session.lock("jobs/nightly") as guard:
                print("holding", guard.sequencer_hex)
"""

import atexit as _atexit

from . import _leasehold
from ._leasehold import (
    Client,
    Election,
    Event,
    LockGuard,
    Node,
    Permit,
    Semaphore,
    Session,
    SessionKeeper,
    Stat,
    Subscription,
    Term,
)
from .errors import (
    Conflict,
    LeaseholdError,
    LockBusy,
    NotAuthorized,
    OutcomeUnknown,
    RequestRefused,
    RetryableError,
    SessionExpired,
    Timeout,
    Unavailable,
)
from .states import SessionState

__version__ = _leasehold.__version__

# Sessions' threads and tasks stop before the interpreter finalizes.
_atexit.register(_leasehold._shutdown)

__all__ = [
    "Client",
    "Conflict",
    "Election",
    "Event",
    "LeaseholdError",
    "LockBusy",
    "LockGuard",
    "Node",
    "NotAuthorized",
    "OutcomeUnknown",
    "Permit",
    "RequestRefused",
    "RetryableError",
    "Semaphore",
    "Session",
    "SessionExpired",
    "SessionKeeper",
    "SessionState",
    "Stat",
    "Subscription",
    "Term",
    "Timeout",
    "Unavailable",
    "__version__",
]
