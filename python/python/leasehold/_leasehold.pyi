"""Types of the compiled module; the package ``leasehold`` re-exports them."""

import datetime
import threading
from typing import Callable, List, Optional, Union

from .states import SessionState

Seconds = Union[float, int, datetime.timedelta]
Contents = Union[bytes, str]

__version__: str

class Stat:
    """A node's metadata (Chubby's counters)."""

    flags: int
    instance: int
    content_generation: int
    lock_generation: int
    modify_index: int
    checksum: int
    size: int

class Node:
    """A node: its key, contents and metadata."""

    @property
    def key(self) -> str: ...
    @property
    def value(self) -> bytes: ...
    @property
    def stat(self) -> Stat: ...

class LockGuard:
    """A lock this session holds; leaving a ``with`` block releases it."""

    @property
    def key(self) -> str: ...
    @property
    def sequencer(self) -> bytes: ...
    @property
    def sequencer_hex(self) -> str: ...
    @property
    def lost(self) -> threading.Event: ...
    def is_held(self) -> bool: ...
    def release(self, timeout: Optional[Seconds] = None) -> None: ...
    def __enter__(self) -> "LockGuard": ...
    def __exit__(self, *exc: object) -> bool: ...

class Session:
    """A session with the master; leaving a ``with`` block closes it."""

    @property
    def id(self) -> str: ...
    @property
    def token(self) -> str: ...
    @property
    def state(self) -> SessionState: ...
    def on_state_change(self, callback: Callable[[SessionState], object]) -> None: ...
    def lock(
        self,
        key: str,
        *,
        shared: bool = False,
        timeout: Optional[Seconds] = None,
        contents: Optional[Contents] = None,
    ) -> LockGuard: ...
    def try_lock(
        self, key: str, *, shared: bool = False, contents: Optional[Contents] = None
    ) -> LockGuard: ...
    def get(self, key: str, *, timeout: Optional[Seconds] = None) -> Optional[Node]: ...
    def close(self, *, timeout: Optional[Seconds] = None) -> None: ...
    def __enter__(self) -> "Session": ...
    def __exit__(self, *exc: object) -> bool: ...

class Client:
    """A client of a master or a cell; safe to share between threads."""

    @staticmethod
    def connect(
        addr: str,
        *,
        timeout: Optional[Seconds] = None,
        token: Optional[str] = None,
        operator_token: Optional[str] = None,
    ) -> "Client": ...
    def session(
        self,
        name: str,
        *,
        lease: Optional[Seconds] = None,
        grace: Optional[Seconds] = None,
        lock_delay: Optional[Seconds] = None,
        cache_keys: Optional[int] = None,
    ) -> Session: ...
    def get(self, key: str, *, timeout: Optional[Seconds] = None) -> Optional[Node]: ...
    def stat(self, key: str, *, timeout: Optional[Seconds] = None) -> Optional[Stat]: ...
    def put(
        self,
        key: str,
        value: Contents,
        *,
        cas: Optional[int] = None,
        flags: Optional[int] = None,
        ephemeral: Optional[Session] = None,
        timeout: Optional[Seconds] = None,
    ) -> int: ...
    def delete(
        self,
        key: str,
        *,
        cas: Optional[int] = None,
        recursive: bool = False,
        timeout: Optional[Seconds] = None,
    ) -> int: ...
    def list(
        self, prefix: str, *, recursive: bool = False, timeout: Optional[Seconds] = None
    ) -> List[str]: ...
    def check_sequencer(
        self, sequencer: Union[bytes, str], *, timeout: Optional[Seconds] = None
    ) -> bool: ...
    def close(self) -> None: ...
    def __enter__(self) -> "Client": ...
    def __exit__(self, *exc: object) -> bool: ...

def _shutdown() -> None: ...
