"""A real ``leasehold serve`` on a free loopback port for each test."""

import os
import pathlib
import subprocess

import pytest

ROOT = pathlib.Path(__file__).resolve().parents[2]


def binary() -> str:
    """The ``leasehold`` binary: $LEASEHOLD_BIN, else the workspace's debug build."""
    found = os.environ.get("LEASEHOLD_BIN") or str(ROOT / "target" / "debug" / "leasehold")
    if not os.path.exists(found):
        pytest.exit(f"no leasehold binary at {found}: run `cargo build -p leasehold-cli` first", 2)
    return found


class Server:
    """One master, in memory unless given flags, killed at the end of the test."""

    def __init__(self, *flags: str) -> None:
        where = flags or ("--listen", "127.0.0.1:0", "--in-memory")
        self.process = subprocess.Popen(
            [binary(), "serve", "--min-lease", "100ms", *where],
            stdout=subprocess.PIPE,
            stderr=subprocess.DEVNULL,
            text=True,
        )
        line = self.process.stdout.readline().strip()
        if not line.startswith("listening on "):
            self.stop()
            raise RuntimeError(f"leasehold serve printed {line!r}")
        self.addr = line[len("listening on ") :]

    @classmethod
    def on_disk(cls, data: str, listen: str) -> "Server":
        """A master keeping its state in ``data``, listening on ``listen``."""
        return cls("--listen", listen, "--data-dir", data)

    def cli(self, *args: str) -> subprocess.CompletedProcess:
        """Runs the CLI against this master."""
        return subprocess.run(
            [binary(), "--addr", self.addr, *args], capture_output=True, text=True, timeout=30
        )

    def stop(self) -> None:
        self.process.kill()
        self.process.wait()


@pytest.fixture
def server():
    started = Server()
    yield started
    started.stop()


@pytest.fixture
def proxy(server):
    """A relay to the master that can hold traffic."""
    from proxy import Proxy

    relay = Proxy(server.addr)
    yield relay
    relay.stop()
