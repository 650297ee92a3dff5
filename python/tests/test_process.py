"""The client in a process of its own: Ctrl-C during a wait, and exits."""

import select
import signal
import subprocess
import sys
import textwrap
import time

import pytest

import leasehold

WAITER = textwrap.dedent(
    """
    import signal
    import sys
    import leasehold

    # As in a terminal: a process started in the background by a shell
    # without job control (as CI may be) inherits SIGINT ignored.
    signal.signal(signal.SIGINT, signal.default_int_handler)

    client = leasehold.Client.connect(sys.argv[1])
    session = client.session("waiter", lock_delay=0)
    print("waiting", flush=True)
    try:
        session.lock("jobs/x")
        print("granted", flush=True)
    except KeyboardInterrupt:
        print("interrupted", flush=True)
    # The session lives on: only the wait was given up.
    sys.stdin.readline()
    session.close()
    """
)


def line_of(process: subprocess.Popen, timeout: float = 20.0) -> str:
    """The next line ``process`` prints, failing the test after ``timeout``."""
    ready, _, _ = select.select([process.stdout], [], [], timeout)
    assert ready, f"no line from the process within {timeout} s"
    return process.stdout.readline().strip()


def test_ctrl_c_ends_a_lock_wait_and_leaves_no_waiter_on_the_master(server):
    with leasehold.Client.connect(server.addr) as client:
        holder = client.session("holder", lock_delay=0)
        guard = holder.lock("jobs/x")
        waiter = subprocess.Popen(
            [sys.executable, "-c", WAITER, server.addr],
            stdin=subprocess.PIPE,
            stdout=subprocess.PIPE,
            text=True,
        )
        try:
            assert line_of(waiter) == "waiting"
            # Let its acquire reach the master's line.
            time.sleep(0.5)
            waiter.send_signal(signal.SIGINT)
            assert line_of(waiter) == "interrupted"
            guard.release()
            # Had the waiter stayed in line, the lock would be its now.
            with client.session("next", lock_delay=0) as taker:
                with taker.try_lock("jobs/x") as taken:
                    assert taken.is_held()
        finally:
            waiter.communicate("\n", timeout=10)
            holder.close()
        assert waiter.returncode == 0


EXITS = textwrap.dedent(
    """
    import sys
    import leasehold

    client = leasehold.Client.connect(sys.argv[1])
    session = client.session("exiting", lock_delay=0)
    states = []
    session.on_state_change(states.append)
    guard = session.lock("exit/" + sys.argv[2])
    client.put("exit/value", "x")

    import asyncio
    from leasehold import aio

    async def asynchronous():
        connected = await aio.Client.connect(sys.argv[1])
        held = await connected.session("exiting-aio", lock_delay=0)
        await held.lock("exit/aio-" + sys.argv[2])
        events = await held.subscribe("exit")
        # A wait in flight when the loop ends.
        asyncio.ensure_future(events.next())
        return connected, held

    kept = asyncio.run(asynchronous())
    # Left open on purpose, in both flavours: interpreter exit must stop
    # the client cleanly.
    """
)


@pytest.mark.parametrize("runs", [100])
def test_a_script_using_both_flavours_exits_cleanly_every_time(server, runs):
    failed = []
    for run in range(runs):
        done = subprocess.run(
            [sys.executable, "-c", EXITS, server.addr, str(run)],
            capture_output=True,
            text=True,
            timeout=30,
        )
        if done.returncode != 0 or done.stderr:
            failed.append((run, done.returncode, done.stderr[-500:]))
    assert failed == [], f"{len(failed)} of {runs} exits were not clean: {failed[:3]}"
