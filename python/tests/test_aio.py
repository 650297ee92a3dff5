"""The asyncio flavour against a real master."""

import asyncio

import pytest

import leasehold
from leasehold import aio


def run(coroutine):
    return asyncio.run(coroutine)


def test_locks_exclude_and_hand_over(server):
    async def scenario():
        async with await aio.Client.connect(server.addr, timeout=5.0) as client:
            async with await client.session("a", lock_delay=0) as a, await client.session("b", lock_delay=0) as b:
                guard = await a.lock("jobs/x")
                with pytest.raises(leasehold.LockBusy):
                    await b.try_lock("jobs/x")
                assert await client.check_sequencer(guard.sequencer)
                waiting = asyncio.ensure_future(b.lock("jobs/x", timeout=5))
                await asyncio.sleep(0.1)
                await guard.release()
                await asyncio.wait_for(guard.lost.wait(), 5)
                taken = await waiting
                assert taken.is_held()
                await taken.release()

    run(scenario())


def test_a_lock_is_released_when_release_returns_in_asyncio(server):
    async def scenario():
        async with await aio.Client.connect(server.addr, timeout=5.0) as client:
            async with await client.session("a", lock_delay=0) as a:
                for _ in range(300):
                    guard = await a.lock("jobs/x")
                    await guard.release()
                    assert not await client.check_sequencer(guard.sequencer)

    run(scenario())

def test_a_cancelled_lock_wait_leaves_no_waiter(server):
    async def scenario():
        async with await aio.Client.connect(server.addr) as client:
            holder = await client.session("holder", lock_delay=0)
            waiter = await client.session("waiter", lock_delay=0)
            guard = await holder.lock("jobs/x")
            with pytest.raises(asyncio.TimeoutError):
                await asyncio.wait_for(waiter.lock("jobs/x"), 0.3)
            await guard.release()
            async with await client.session("next", lock_delay=0) as taker:
                for _ in range(50):
                    try:
                        async with await taker.try_lock("jobs/x") as taken:
                            assert taken.is_held()
                        break
                    except leasehold.LockBusy:
                        await asyncio.sleep(0.05)
                else:
                    pytest.fail("the cancelled waiter's session kept the lock")
            await holder.close()
            await waiter.close()

    run(scenario())


def test_kv_and_subscriptions(server):
    async def scenario():
        async with await aio.Client.connect(server.addr) as client:
            async with await client.session("w") as session:
                events = await session.subscribe("config", prefix=True)
                await client.put("config/a", "1")
                await client.put("config/a", "2")
                assert (await client.get("config/a")).value == b"2"
                assert await client.list("config") == ["config/a"]
                seen = []
                async for event in events:
                    if event.kind == "changed":
                        seen.append((event.change, event.value))
                    if len(seen) == 2:
                        break
                assert seen == [("created", b"1"), ("modified", b"2")]

    run(scenario())


def test_an_election_in_asyncio(server):
    async def scenario():
        async with await aio.Client.connect(server.addr) as client:
            async with await client.session("a", lock_delay=0) as a:
                async with await aio.Election(a, "svc/leader").campaign("10.0.0.1") as term:
                    assert term.is_leader()
                    assert await client.leader("svc/leader") == (a.id, b"10.0.0.1")
                assert await client.leader("svc/leader") is None

    run(scenario())


def test_states_through_a_stalled_link_in_asyncio(proxy):
    from test_states import Recorder

    from leasehold import SessionState

    async def scenario():
        async with await aio.Client.connect(proxy.addr, timeout=5.0) as client:
            session = await client.session("stalled", lease=2.0, grace=20.0)
            seen = Recorder()
            session.on_state_change(seen)
            guard = await session.lock("jobs/x")
            # Held once the KeepAlive has reached the master (see the
            # blocking flavour's test).
            await asyncio.sleep(0.3)
            proxy.hold()
            await asyncio.wait_for(guard.lost.wait(), 10)
            assert seen.wait_for(SessionState.JEOPARDY, 10)
            proxy.release()
            assert seen.wait_for(SessionState.NORMAL, 10), seen.states
            assert seen.states[:3] == [SessionState.JEOPARDY, SessionState.SAFE, SessionState.NORMAL]
            # The master kept the session: it stays normal past its lease.
            await asyncio.sleep(3.0)
            assert session.state is SessionState.NORMAL, seen.states
            await session.close()

    run(scenario())


def test_a_restarted_master_brings_failover_in_asyncio(tmp_path):
    from conftest import Server
    from test_states import Recorder

    from leasehold import SessionState

    data = str(tmp_path / "data")
    first = Server.on_disk(data, "127.0.0.1:0")
    addr = first.addr

    async def scenario():
        nonlocal first
        async with await aio.Client.connect(addr, timeout=5.0) as client:
            session = await client.session("survivor", lease=5.0, grace=20.0)
            seen = Recorder()
            session.on_state_change(seen)
            guard = await session.lock("jobs/x")
            first.stop()
            first = Server.on_disk(data, addr)
            assert seen.wait_for(SessionState.NORMAL, 20) and SessionState.FAILOVER in seen.states
            assert await client.check_sequencer(guard.sequencer)
            await session.close()

    try:
        run(scenario())
    finally:
        first.stop()


def test_a_cut_past_the_grace_period_expires_in_asyncio(proxy):
    from leasehold import SessionState

    async def scenario():
        async with await aio.Client.connect(proxy.addr, timeout=2.0) as client:
            session = await client.session("cut", lease=1.0, grace=1.0)
            guard = await session.lock("jobs/x")
            proxy.hold()
            await asyncio.wait_for(guard.lost.wait(), 10)
            for _ in range(150):
                if session.state is SessionState.EXPIRED:
                    break
                await asyncio.sleep(0.1)
            assert session.state is SessionState.EXPIRED
            proxy.release()
            with pytest.raises(leasehold.SessionExpired):
                await session.lock("jobs/x", timeout=1)

    run(scenario())
