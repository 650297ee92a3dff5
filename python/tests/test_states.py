"""Session states as the callbacks see them, through a link that stalls,
a master restarted, and a cut longer than the grace period."""

import os
import subprocess
import threading
import time

import pytest

import leasehold
from conftest import Server, binary
from leasehold import SessionState


class Recorder:
    """The states a session's callbacks were called with, in order."""

    def __init__(self) -> None:
        self.states = []
        self.changed = threading.Condition()

    def __call__(self, state) -> None:
        with self.changed:
            self.states.append(state)
            self.changed.notify_all()

    def wait_for(self, state, timeout: float) -> bool:
        with self.changed:
            return self.changed.wait_for(lambda: state in self.states, timeout)


def test_a_stalled_link_brings_jeopardy_then_safe_then_normal(proxy):
    with leasehold.Client.connect(proxy.addr, timeout=5.0) as client:
        session = client.session("stalled", lease=2.0, grace=20.0)
        seen = Recorder()
        session.on_state_change(seen)
        guard = session.lock("jobs/x")
        # Held once the session's KeepAlive has reached the master, which
        # answers it (extending the lease) while the answer waits in the
        # relay: the client's local lease runs out, the master's does not.
        time.sleep(0.3)
        proxy.hold()
        assert seen.wait_for(SessionState.JEOPARDY, 10)
        assert guard.lost.wait(5), "a lock is not to be relied on in jeopardy"
        assert not guard.is_held()
        proxy.release()
        assert seen.wait_for(SessionState.NORMAL, 10)
        assert seen.states[:3] == [SessionState.JEOPARDY, SessionState.SAFE, SessionState.NORMAL]
        # The master kept the session: it stays normal past its lease.
        time.sleep(3.0)
        assert session.state is SessionState.NORMAL, seen.states
        session.close()


def test_a_session_closed_right_after_a_stalled_link_recovers_closes(proxy, server):
    # CS-8: the close does not wait behind the probe that was opening a new
    # connection when the link recovered; its lock passes on at once.
    with leasehold.Client.connect(proxy.addr, timeout=5.0) as client:
        session = client.session("stalled", lease=2.0, grace=20.0)
        seen = Recorder()
        session.on_state_change(seen)
        session.lock("jobs/x")
        time.sleep(0.3)
        proxy.hold()
        assert seen.wait_for(SessionState.JEOPARDY, 10)
        proxy.release()
        assert seen.wait_for(SessionState.NORMAL, 10)
        session.close()
    with leasehold.Client.connect(server.addr, timeout=5.0) as direct:
        with direct.session("next") as other:
            with other.try_lock("jobs/x") as guard:
                assert guard.is_held()


def test_a_cut_longer_than_the_grace_period_expires_the_session(proxy):
    with leasehold.Client.connect(proxy.addr, timeout=2.0) as client:
        session = client.session("cut", lease=1.0, grace=1.0)
        seen = Recorder()
        session.on_state_change(seen)
        proxy.hold()
        assert seen.wait_for(SessionState.EXPIRED, 15)
        assert seen.states[0] == SessionState.JEOPARDY
        assert session.state is SessionState.EXPIRED
        proxy.release()
        with pytest.raises(leasehold.SessionExpired):
            session.lock("jobs/x", timeout=1)


def test_a_restarted_master_brings_failover_then_normal(tmp_path):
    data = str(tmp_path / "data")
    first = Server.on_disk(data, "127.0.0.1:0")
    addr = first.addr
    try:
        with leasehold.Client.connect(addr, timeout=5.0) as client:
            session = client.session("survivor", lease=5.0, grace=20.0)
            seen = Recorder()
            session.on_state_change(seen)
            guard = session.lock("jobs/x")
            first.stop()
            first = Server.on_disk(data, addr)
            assert seen.wait_for(SessionState.FAILOVER, 20)
            assert seen.wait_for(SessionState.NORMAL, 20)
            assert SessionState.EXPIRED not in seen.states
            assert client.check_sequencer(guard.sequencer), "the lock survived the fail-over"
            session.close()
    finally:
        first.stop()


HOLDER = """
import sys, leasehold
client = leasehold.Client.connect(sys.argv[1])
session = client.session("holder", lease=1.0, lock_delay=2.0)
guard = session.lock("jobs/x")
print("holding", flush=True)
sys.stdin.readline()
"""


def test_a_killed_holders_lock_passes_after_lock_delay(server):
    import sys

    holder = subprocess.Popen(
        [sys.executable, "-c", HOLDER, server.addr], stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True
    )
    try:
        from test_process import line_of

        assert line_of(holder) == "holding"
        holder.kill()
        holder.wait()
        with leasehold.Client.connect(server.addr) as client:
            with client.session("next") as session:
                started = time.monotonic()
                while True:
                    try:
                        session.try_lock("jobs/x")
                        pytest.fail("the lock was free before the holder's lease ran out")
                    except leasehold.LockBusy as busy:
                        if busy.lock_delay_left is not None:
                            assert 0 < busy.lock_delay_left <= 2.0
                            break
                    assert time.monotonic() - started < 10, "the holder's session never ended"
                    time.sleep(0.1)
                with session.lock("jobs/x", timeout=10) as guard:
                    assert guard.is_held()
    finally:
        if holder.poll() is None:
            holder.kill()
