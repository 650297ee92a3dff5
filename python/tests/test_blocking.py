"""The blocking flavour against a real master."""

import logging
import threading

import pytest

import leasehold
from leasehold import SessionState


@pytest.fixture
def client(server):
    with leasehold.Client.connect(server.addr, timeout=5.0) as connected:
        yield connected


def test_a_value_put_is_read_back(client):
    index = client.put("svc/db", "10.0.0.5")
    node = client.get("svc/db")
    assert node.value == b"10.0.0.5"
    assert node.stat.modify_index == index
    assert client.get("svc/none") is None


def test_a_put_that_loses_its_compare_and_set_raises_conflict(client):
    first = client.put("svc/db", b"a")
    client.put("svc/db", b"b")
    with pytest.raises(leasehold.Conflict):
        client.put("svc/db", b"c", cas=first)
    assert client.get("svc/db").value == b"b"


def test_an_exclusive_lock_excludes_then_hands_over(client):
    with client.session("a", lock_delay=0) as a, client.session("b", lock_delay=0) as b:
        guard = a.lock("jobs/x")
        assert guard.is_held()
        with pytest.raises(leasehold.LockBusy) as busy:
            b.try_lock("jobs/x")
        assert isinstance(busy.value, leasehold.RetryableError)
        guard.release()
        assert guard.lost.wait(5)
        with b.lock("jobs/x", timeout=5) as taken:
            assert taken.is_held()


def test_a_lock_wait_that_runs_out_raises_lock_busy(client):
    with client.session("a") as a, client.session("b") as b:
        with a.lock("jobs/x"):
            with pytest.raises(leasehold.LockBusy):
                b.lock("jobs/x", timeout=0.3)


def test_a_sequencer_checks_while_held_and_not_after(client):
    with client.session("a", lock_delay=0) as a:
        guard = a.lock("jobs/x")
        assert client.check_sequencer(guard.sequencer)
        assert client.check_sequencer(guard.sequencer_hex)
        guard.release()
        assert not client.check_sequencer(guard.sequencer)


def test_a_lock_is_released_when_release_returns(client):
    # A release that returned before the guard's watcher let go of it left
    # the lock held in the background, 4 times in 2,000 on a busy machine.
    with client.session("a", lock_delay=0) as a:
        for _ in range(300):
            guard = a.lock("jobs/x")
            guard.release()
            assert not client.check_sequencer(guard.sequencer)


def test_a_closed_session_reports_closed_to_its_callbacks(client):
    seen = []
    done = threading.Event()

    def record(state):
        seen.append(state)
        if state.is_final:
            done.set()

    session = client.session("a")
    assert session.state is SessionState.NORMAL
    session.on_state_change(record)
    session.close()
    assert done.wait(5)
    assert seen == [SessionState.CLOSED]
    assert session.state is SessionState.CLOSED


def test_a_callback_that_raises_is_logged_and_later_ones_still_run(client, caplog):
    later = threading.Event()

    def broken(state):
        raise ValueError("a bug in the application's callback")

    session = client.session("a")
    session.on_state_change(broken)
    session.on_state_change(lambda state: later.set())
    with caplog.at_level(logging.ERROR, logger="leasehold"):
        session.close()
        assert later.wait(5)
    assert any("callback" in r.getMessage() and r.exc_info for r in caplog.records)


def test_a_lock_held_by_a_closed_session_passes_without_lock_delay(client):
    holder = client.session("holder", lock_delay=30)
    holder.lock("jobs/x")
    holder.close()
    with client.session("next") as taker:
        with taker.try_lock("jobs/x") as guard:
            assert guard.is_held()


def test_many_threads_share_one_client(client):
    failures = []

    def work(n):
        try:
            for i in range(20):
                client.put(f"t/{n}", str(i))
                assert client.get(f"t/{n}").value == str(i).encode()
        except Exception as e:  # noqa: BLE001 - reported below
            failures.append(e)

    threads = [threading.Thread(target=work, args=(n,)) for n in range(8)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert failures == []
    assert sorted(client.list("t")) == sorted(f"t/{n}" for n in range(8))


def test_durations_may_be_timedeltas_and_bad_ones_are_refused(client):
    import datetime

    with client.session("a", lease=datetime.timedelta(seconds=5)) as session:
        assert session.state is SessionState.NORMAL
    with pytest.raises(ValueError):
        client.session("b", lease=-1)
    with pytest.raises(TypeError):
        client.session("b", lease="12s")


def test_a_closed_client_refuses_calls(server):
    client = leasehold.Client.connect(server.addr)
    client.close()
    with pytest.raises(leasehold.RequestRefused):
        client.get("x")


def test_an_unreachable_master_raises_unavailable():
    with pytest.raises(leasehold.Unavailable):
        leasehold.Client.connect("127.0.0.1:1", timeout=2.0)
