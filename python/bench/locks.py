"""Lock cycles from Python: leasehold's package beside kazoo (ZooKeeper)
and python-etcd3 (etcd), each thread taking and releasing its own lock as
fast as it can, for a bounded time and count.

    python python/bench/locks.py --system leasehold --addr 127.0.0.1:7171
    python python/bench/locks.py --system kazoo --addr 127.0.0.1:2181
    python python/bench/locks.py --system etcd3 --addr 127.0.0.1:2379

Peers run with bench/peers/start.sh start; a master with
`leasehold serve` (on disk, as the Rust benchmarks run it). Prints one
line per thread count: cycles per second, and the median and 99th
percentile of one cycle. Traffic goes to the address given only.
"""

import argparse
import statistics
import threading
import time
from typing import Callable, List, Tuple

# At most this many cycles per thread, whatever --seconds says.
MAX_CYCLES = 200_000


def leasehold_cycle(addr: str, thread: int) -> Tuple[Callable[[], None], Callable[[], None]]:
    import leasehold

    client = leasehold.Client.connect(addr)
    session = client.session(f"bench-{thread}", lock_delay=0)
    key = f"bench/python/{thread}"

    def cycle() -> None:
        session.lock(key).release()

    def close() -> None:
        session.close()
        client.close()

    return cycle, close


def kazoo_cycle(addr: str, thread: int) -> Tuple[Callable[[], None], Callable[[], None]]:
    from kazoo.client import KazooClient

    zk = KazooClient(hosts=addr)
    zk.start()
    lock = zk.Lock(f"/bench/python/{thread}", f"bench-{thread}")

    def cycle() -> None:
        lock.acquire()
        lock.release()

    def close() -> None:
        zk.stop()
        zk.close()

    return cycle, close


def etcd3_cycle(addr: str, thread: int) -> Tuple[Callable[[], None], Callable[[], None]]:
    import etcd3

    host, port = addr.rsplit(":", 1)
    client = etcd3.client(host=host, port=int(port))
    lock = client.lock(f"bench-python-{thread}", ttl=60)

    def cycle() -> None:
        lock.acquire()
        lock.release()

    def close() -> None:
        client.close()

    return cycle, close


SYSTEMS = {"leasehold": leasehold_cycle, "kazoo": kazoo_cycle, "etcd3": etcd3_cycle}


def run(system: str, addr: str, threads: int, seconds: float) -> Tuple[float, float, float]:
    made = [SYSTEMS[system](addr, t) for t in range(threads)]
    latencies: List[List[float]] = [[] for _ in range(threads)]
    start = threading.Barrier(threads + 1)
    deadline = [0.0]

    def work(t: int) -> None:
        cycle = made[t][0]
        cycle()  # warm: the first takes a connection's and a node's setup
        start.wait()
        own = latencies[t]
        while len(own) < MAX_CYCLES and time.perf_counter() < deadline[0]:
            began = time.perf_counter()
            cycle()
            own.append(time.perf_counter() - began)

    workers = [threading.Thread(target=work, args=(t,)) for t in range(threads)]
    for w in workers:
        w.start()
    began = time.perf_counter()
    deadline[0] = began + seconds
    start.wait()
    for w in workers:
        w.join()
    took = time.perf_counter() - began
    for _, close in made:
        close()
    every = sorted(x for own in latencies for x in own)
    p99 = every[min(len(every) - 1, int(len(every) * 0.99))]
    return len(every) / took, statistics.median(every), p99


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--system", choices=sorted(SYSTEMS), required=True)
    parser.add_argument("--addr", required=True)
    parser.add_argument("--threads", type=int, action="append", help="repeatable; default 1 and 16")
    parser.add_argument("--seconds", type=float, default=5.0)
    args = parser.parse_args()
    host = args.addr.rsplit(":", 1)[0]
    if not host.startswith("127.") and host != "localhost":
        parser.error("benchmarks send traffic to loopback only")
    for threads in args.threads or [1, 16]:
        rate, p50, p99 = run(args.system, args.addr, threads, min(args.seconds, 60.0))
        print(f"{args.system:9} threads {threads:3}  {rate:9.0f} cycles/s  p50 {p50 * 1e3:6.2f} ms  p99 {p99 * 1e3:6.2f} ms")


if __name__ == "__main__":
    main()
