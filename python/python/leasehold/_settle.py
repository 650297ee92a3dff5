"""Completes an asyncio future from the client's threads, on its loop."""

import asyncio
from typing import Any


def settle(loop: asyncio.AbstractEventLoop, future: "asyncio.Future[Any]", method: str, value: Any) -> None:
    """Calls ``future.<method>(value)`` on ``loop``, unless the future was
    cancelled meanwhile or the loop is closed (nobody awaits it then)."""

    def apply() -> None:
        if not future.done():
            getattr(future, method)(value)

    try:
        loop.call_soon_threadsafe(apply)
    except RuntimeError:
        pass
