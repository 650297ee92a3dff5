"""Elections, semaphores and subscriptions against a real master."""

import threading

import pytest

import leasehold
from leasehold import Election, Semaphore, SessionState


@pytest.fixture
def client(server):
    with leasehold.Client.connect(server.addr, timeout=5.0) as connected:
        yield connected


def test_one_leader_at_a_time_and_the_next_leads_when_it_resigns(client):
    with client.session("a", lock_delay=0) as a, client.session("b", lock_delay=0) as b:
        term = Election(a, "svc/leader").campaign("10.0.0.1")
        assert term.is_leader()
        assert client.leader("svc/leader") == (a.id, b"10.0.0.1")
        assert Election(b, "svc/leader").try_campaign("10.0.0.2") is None
        term.proclaim("10.0.0.3")
        assert client.leader("svc/leader") == (a.id, b"10.0.0.3")
        assert client.check_sequencer(term.sequencer), "proclaiming keeps the term"
        waiting = {}
        runner = threading.Thread(
            target=lambda: waiting.setdefault("term", Election(b, "svc/leader").campaign("10.0.0.2"))
        )
        runner.start()
        term.resign()
        runner.join(10)
        assert term.lost.is_set()
        assert waiting["term"].is_leader()
        assert client.leader("svc/leader") == (b.id, b"10.0.0.2")
        waiting["term"].resign()


def test_a_semaphore_admits_its_limit_and_no_more(client):
    sessions = [client.session(f"s{i}", lock_delay=0) for i in range(3)]
    try:
        permits = [Semaphore(s, "pool", 2).acquire(f"s{i}", timeout=5) for i, s in enumerate(sessions[:2])]
        assert all(p.is_held() for p in permits)
        with pytest.raises(leasehold.LeaseholdError):
            Semaphore(sessions[2], "pool", 2).acquire("s2", timeout=0.5)
        permits[0].release()
        with Semaphore(sessions[2], "pool", 2).acquire("s2", timeout=5) as third:
            assert third.is_held()
    finally:
        for s in sessions:
            s.close()


def test_a_subscription_delivers_changes_in_order(client):
    with client.session("watcher") as session:
        events = session.subscribe("config", prefix=True)
        for i in range(5):
            client.put("config/a", str(i))
        client.delete("config/a")
        changes = []
        while len(changes) < 6:
            event = events.next(timeout=5)
            if event.kind == "changed":
                changes.append((event.change, event.value))
        assert changes == [("created", b"0")] + [("modified", str(i).encode()) for i in range(1, 5)] + [
            ("deleted", None)
        ]


def test_a_subscription_ends_with_its_session(client):
    session = client.session("watcher")
    events = session.subscribe("config")
    session.close()
    seen = list(events)
    assert seen[-1].kind == "session" and seen[-1].state is SessionState.CLOSED


def test_a_session_keeper_hands_out_one_live_session_then_a_new_one(client):
    keeper = leasehold.SessionKeeper(client, "kept", lease=5.0)
    first = keeper.session()
    assert keeper.session().id == first.id
    first.close()
    second = keeper.session()
    assert second.id != first.id
    assert second.state is SessionState.NORMAL
    keeper.close()
    assert second.state is SessionState.CLOSED


def test_a_watch_returns_when_the_node_changes(client):
    index, node = client.watch("config/a", timeout=0.2)
    assert node is None
    writer = threading.Timer(0.2, lambda: client.put("config/a", "1"))
    writer.start()
    changed, node = client.watch("config/a", index, timeout=10)
    writer.join()
    assert changed > index
    assert node.value == b"1"
