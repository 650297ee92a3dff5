# The compiled objects are used untyped here: their stubs describe the
# blocking calls; this module's own signatures are what callers see.
# mypy: disable-error-code="no-any-return"
"""The ``asyncio`` flavour: the same names as the blocking API, awaited.

::

    import asyncio
    from leasehold import aio

    async def main():
        async with await aio.Client.connect("127.0.0.1:7171") as client:
            async with await client.session("worker-1", lease=12.0) as session:
                async with await session.lock("jobs/nightly") as guard:
                    print("holding", guard.sequencer_hex)

    asyncio.run(main())

Each call runs on the client's own threads and completes an ``asyncio``
future on the caller's loop; cancelling the awaiting task drops the call,
which withdraws a lock wait from the master's line (``LOCK-17``).
"""

import asyncio
from typing import Any, AsyncIterator, Callable, List, Optional, Tuple, Union

from . import _leasehold
from ._leasehold import Node, Stat
from .states import SessionState

__all__ = [
    "Client",
    "Election",
    "LockGuard",
    "Lost",
    "Permit",
    "Semaphore",
    "Session",
    "SessionKeeper",
    "Subscription",
    "Term",
]

Seconds = Union[float, int, Any]


class Lost:
    """Set as soon as what is held can no longer be relied on: ``await
    lost.wait()`` (or ``await lost``), or ``lost.is_set()``."""

    def __init__(self, held: Any) -> None:
        self._held = held

    def is_set(self) -> bool:
        return bool(self._held.lost.is_set())

    async def wait(self) -> bool:
        return bool(await self._held._lost_async())

    def __await__(self) -> Any:
        return self.wait().__await__()


class LockGuard:
    """A lock this session holds; ``async with`` releases it on leaving."""

    def __init__(self, guard: Any) -> None:
        self._guard: Any = guard
        self.lost = Lost(guard)

    @property
    def key(self) -> str:
        return self._guard.key

    @property
    def sequencer(self) -> bytes:
        return self._guard.sequencer

    @property
    def sequencer_hex(self) -> str:
        return self._guard.sequencer_hex

    def is_held(self) -> bool:
        return self._guard.is_held()

    async def release(self, timeout: Optional[Seconds] = None) -> None:
        await self._guard.release(timeout, _aio=True)

    async def __aenter__(self) -> "LockGuard":
        return self

    async def __aexit__(self, *exc: object) -> bool:
        await self.release()
        return False


class Term:
    """A term of leadership; ``async with`` resigns on leaving."""

    def __init__(self, term: Any) -> None:
        self._term: Any = term
        self.lost = Lost(term)

    @property
    def sequencer(self) -> bytes:
        return self._term.sequencer

    @property
    def sequencer_hex(self) -> str:
        return self._term.sequencer_hex

    def is_leader(self) -> bool:
        return self._term.is_leader()

    async def proclaim(self, value: Union[bytes, str]) -> None:
        await self._term.proclaim(value, _aio=True)

    async def resign(self) -> None:
        await self._term.resign(_aio=True)

    async def __aenter__(self) -> "Term":
        return self

    async def __aexit__(self, *exc: object) -> bool:
        await self.resign()
        return False


class Permit:
    """One slot of a semaphore; ``async with`` releases it on leaving."""

    def __init__(self, permit: Any) -> None:
        self._permit: Any = permit
        self.lost = Lost(permit)

    def is_held(self) -> bool:
        return self._permit.is_held()

    async def release(self) -> None:
        await self._permit.release(_aio=True)

    async def __aenter__(self) -> "Permit":
        return self

    async def __aexit__(self, *exc: object) -> bool:
        await self.release()
        return False


class Subscription:
    """Events in order, as an async iterator; it ends with the session."""

    def __init__(self, subscription: Any) -> None:
        self._subscription: Any = subscription

    def __aiter__(self) -> AsyncIterator["_leasehold.Event"]:
        return self

    async def __anext__(self) -> "_leasehold.Event":
        event = await self._subscription.next(None, _aio=True)
        if event is None:
            raise StopAsyncIteration
        return event

    async def next(self, timeout: Optional[Seconds] = None) -> Optional["_leasehold.Event"]:
        return await self._subscription.next(timeout, _aio=True)

    async def cancel(self) -> None:
        await self._subscription.cancel(_aio=True)


class Session:
    """A session; ``async with`` closes it on leaving."""

    def __init__(self, session: Any) -> None:
        self._session: Any = session

    @property
    def id(self) -> str:
        return self._session.id

    @property
    def token(self) -> str:
        return self._session.token

    @property
    def state(self) -> SessionState:
        return self._session.state

    def on_state_change(self, callback: Callable[[SessionState], object]) -> None:
        """As the blocking flavour: ``callback`` runs on the session's own
        thread; hand work to the loop with ``loop.call_soon_threadsafe``."""
        self._session.on_state_change(callback)

    async def lock(
        self,
        key: str,
        *,
        shared: bool = False,
        timeout: Optional[Seconds] = None,
        contents: Optional[Union[bytes, str]] = None,
    ) -> LockGuard:
        guard = await self._session.lock(key, shared=shared, timeout=timeout, contents=contents, _aio=True)
        return LockGuard(guard)

    async def try_lock(
        self, key: str, *, shared: bool = False, contents: Optional[Union[bytes, str]] = None
    ) -> LockGuard:
        guard = await self._session.try_lock(key, shared=shared, contents=contents, _aio=True)
        return LockGuard(guard)

    async def get(self, key: str, *, timeout: Optional[Seconds] = None) -> Optional[Node]:
        return await self._session.get(key, timeout=timeout, _aio=True)

    async def subscribe(self, key: str, *, prefix: bool = False) -> Subscription:
        return Subscription(await self._session.subscribe(key, prefix=prefix, _aio=True))

    async def close(self, *, timeout: Optional[Seconds] = None) -> None:
        await self._session.close(timeout=timeout, _aio=True)

    async def __aenter__(self) -> "Session":
        return self

    async def __aexit__(self, *exc: object) -> bool:
        await self.close()
        return False


class Election:
    """An election on ``key`` for ``session``."""

    def __init__(self, session: Session, key: str) -> None:
        self._election: Any = _leasehold.Election(session._session, key)

    @property
    def key(self) -> str:
        return self._election.key

    async def campaign(self, value: Union[bytes, str], *, timeout: Optional[Seconds] = None) -> Term:
        return Term(await self._election.campaign(value, timeout=timeout, _aio=True))

    async def try_campaign(self, value: Union[bytes, str]) -> Optional[Term]:
        term = await self._election.try_campaign(value, _aio=True)
        return None if term is None else Term(term)

    async def leader(self) -> Optional[Tuple[str, bytes]]:
        return await self._election.leader(_aio=True)


class Semaphore:
    """A counting semaphore of ``limit`` slots under ``prefix``."""

    def __init__(self, session: Session, prefix: str, limit: int) -> None:
        self._semaphore: Any = _leasehold.Semaphore(session._session, prefix, limit)

    async def acquire(self, value: str = "", *, timeout: Optional[Seconds] = None) -> Permit:
        return Permit(await self._semaphore.acquire(value, timeout=timeout, _aio=True))


class Client:
    """A client of a master or a cell; ``async with`` closes it on leaving."""

    def __init__(self, client: Any) -> None:
        self._client: Any = client

    @staticmethod
    async def connect(
        addr: str,
        *,
        timeout: Optional[Seconds] = None,
        token: Optional[str] = None,
        operator_token: Optional[str] = None,
    ) -> "Client":
        connect: Any = _leasehold.Client.connect
        made = await connect(
            addr, timeout=timeout, token=token, operator_token=operator_token, _aio=True
        )
        return Client(made)

    async def session(
        self,
        name: str,
        *,
        lease: Optional[Seconds] = None,
        grace: Optional[Seconds] = None,
        lock_delay: Optional[Seconds] = None,
        cache_keys: Optional[int] = None,
    ) -> Session:
        made = await self._client.session(
            name, lease=lease, grace=grace, lock_delay=lock_delay, cache_keys=cache_keys, _aio=True
        )
        return Session(made)

    async def get(self, key: str, *, timeout: Optional[Seconds] = None) -> Optional[Node]:
        return await self._client.get(key, timeout=timeout, _aio=True)

    async def stat(self, key: str, *, timeout: Optional[Seconds] = None) -> Optional[Stat]:
        return await self._client.stat(key, timeout=timeout, _aio=True)

    async def put(
        self,
        key: str,
        value: Union[bytes, str],
        *,
        cas: Optional[int] = None,
        flags: Optional[int] = None,
        ephemeral: Optional[Session] = None,
        timeout: Optional[Seconds] = None,
    ) -> int:
        owner = None if ephemeral is None else ephemeral._session
        return await self._client.put(
            key, value, cas=cas, flags=flags, ephemeral=owner, timeout=timeout, _aio=True
        )

    async def delete(
        self, key: str, *, cas: Optional[int] = None, recursive: bool = False, timeout: Optional[Seconds] = None
    ) -> int:
        return await self._client.delete(key, cas=cas, recursive=recursive, timeout=timeout, _aio=True)

    async def list(self, prefix: str, *, recursive: bool = False, timeout: Optional[Seconds] = None) -> List[str]:
        return await self._client.list(prefix, recursive=recursive, timeout=timeout, _aio=True)

    async def check_sequencer(self, sequencer: Union[bytes, str], *, timeout: Optional[Seconds] = None) -> bool:
        return await self._client.check_sequencer(sequencer, timeout=timeout, _aio=True)

    async def leader(self, key: str, *, timeout: Optional[Seconds] = None) -> Optional[Tuple[str, bytes]]:
        return await self._client.leader(key, timeout=timeout, _aio=True)

    async def watch(
        self, key: str, after_index: int = 0, *, timeout: Optional[Seconds] = None
    ) -> Tuple[int, Optional[Node]]:
        return await self._client.watch(key, after_index, timeout=timeout, _aio=True)

    def close(self) -> None:
        self._client.close()

    async def __aenter__(self) -> "Client":
        return self

    async def __aexit__(self, *exc: object) -> bool:
        self.close()
        return False


class SessionKeeper:
    """Hands out one live session at a time, creating a new one after the last ended."""

    def __init__(
        self,
        client: Client,
        name: str,
        *,
        lease: Optional[Seconds] = None,
        grace: Optional[Seconds] = None,
        lock_delay: Optional[Seconds] = None,
        cache_keys: Optional[int] = None,
    ) -> None:
        self._keeper: Any = _leasehold.SessionKeeper(
            client._client, name, lease=lease, grace=grace, lock_delay=lock_delay, cache_keys=cache_keys
        )

    async def session(self) -> Session:
        return Session(await self._keeper.session(_aio=True))

    async def close(self) -> None:
        await self._keeper.close(_aio=True)
