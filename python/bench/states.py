"""What a session's state change costs to deliver to Python: leasehold's
package beside kazoo (ZooKeeper). python-etcd3 has no session state to
listen to, so it has no figure here.

    python python/bench/states.py --system leasehold --addr 127.0.0.1:7171
    python python/bench/states.py --system kazoo --addr 127.0.0.1:2181

Each round opens a session with a state listener, then ends it from the
client (leasehold: `session.close()`, kazoo: `zk.stop()`) and times, from
the call, when the call returned and when the listener heard the final
state (leasehold's CLOSED, kazoo's LOST). Both include the round trip
that ends the session on the server. A bounded number of rounds; traffic
goes to the address given only. Prints the median and 99th percentile of
both, and the process's CPU time per delivered change.
"""

import argparse
import statistics
import threading
import time
from typing import Callable, List, Tuple

# Rounds, whatever --rounds says.
MAX_ROUNDS = 2_000
# How long one round waits for its listener before it counts as lost.
LISTENER_PATIENCE = 10.0


class Heard:
    """When the final state reached the listener."""

    def __init__(self) -> None:
        self.at = 0.0
        self.event = threading.Event()

    def now(self) -> None:
        self.at = time.perf_counter()
        self.event.set()


def leasehold_rounds(addr: str) -> Tuple[Callable[[Heard], Callable[[], None]], Callable[[], None]]:
    import leasehold

    client = leasehold.Client.connect(addr)

    def open_session(heard: Heard) -> Callable[[], None]:
        session = client.session("bench-states", lock_delay=0)

        def listener(state: "leasehold.SessionState") -> None:
            if state is leasehold.SessionState.CLOSED:
                heard.now()

        session.on_state_change(listener)
        return session.close

    return open_session, client.close


def kazoo_rounds(addr: str) -> Tuple[Callable[[Heard], Callable[[], None]], Callable[[], None]]:
    from kazoo.client import KazooClient, KazooState

    def open_session(heard: Heard) -> Callable[[], None]:
        zk = KazooClient(hosts=addr)
        zk.start()

        def listener(state: str) -> None:
            if state == KazooState.LOST:
                heard.now()

        zk.add_listener(listener)

        def end() -> None:
            zk.stop()
            zk.close()

        return end

    return open_session, lambda: None


SYSTEMS = {"leasehold": leasehold_rounds, "kazoo": kazoo_rounds}


def percentile(values: List[float], p: float) -> float:
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, int(len(ordered) * p))]


def run(system: str, addr: str, rounds: int) -> None:
    open_session, done = SYSTEMS[system](addr)
    returned: List[float] = []
    delivered: List[float] = []
    missed = 0
    cpu = 0.0
    for _ in range(rounds):
        heard = Heard()
        end = open_session(heard)
        cpu_before = time.process_time()
        began = time.perf_counter()
        end()
        returned.append(time.perf_counter() - began)
        if heard.event.wait(LISTENER_PATIENCE):
            delivered.append(heard.at - began)
        else:
            missed += 1
        cpu += time.process_time() - cpu_before
    done()
    if not delivered:
        print(f"{system:9} no listener heard the end of its session in {rounds} rounds")
        return
    print(
        f"{system:9} rounds {rounds}  call returned p50 {statistics.median(returned) * 1e3:6.2f} ms"
        f" p99 {percentile(returned, 0.99) * 1e3:6.2f} ms"
        f"  listener heard p50 {statistics.median(delivered) * 1e3:6.2f} ms"
        f" p99 {percentile(delivered, 0.99) * 1e3:6.2f} ms"
        f"  CPU {cpu / rounds * 1e6:6.0f} us per change  missed {missed}"
    )


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--system", choices=sorted(SYSTEMS), required=True)
    parser.add_argument("--addr", required=True)
    parser.add_argument("--rounds", type=int, default=200)
    args = parser.parse_args()
    host = args.addr.rsplit(":", 1)[0]
    if not host.startswith("127.") and host != "localhost":
        parser.error("benchmarks send traffic to loopback only")
    run(args.system, args.addr, max(1, min(args.rounds, MAX_ROUNDS)))


if __name__ == "__main__":
    main()
