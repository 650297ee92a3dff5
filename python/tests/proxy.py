"""A loopback relay whose link can hold traffic, as a network that stalls."""

import socket
import threading
from typing import List, Tuple


class Proxy:
    """Relays connections from ``addr`` to ``upstream``; ``hold()`` keeps
    bytes in the relay (both ways) until ``release()``, as a stalled
    network does: nothing is lost or closed."""

    def __init__(self, upstream: str) -> None:
        host, port = upstream.rsplit(":", 1)
        self.upstream: Tuple[str, int] = (host, int(port))
        self.listener = socket.socket()
        self.listener.bind(("127.0.0.1", 0))
        self.listener.listen()
        self.addr = "127.0.0.1:%d" % self.listener.getsockname()[1]
        self.passing = threading.Event()
        self.passing.set()
        self.stopped = threading.Event()
        self.sockets: List[socket.socket] = []
        threading.Thread(target=self._accept, daemon=True).start()

    def hold(self) -> None:
        self.passing.clear()

    def release(self) -> None:
        self.passing.set()

    def stop(self) -> None:
        self.stopped.set()
        self.passing.set()
        self.listener.close()
        for s in self.sockets:
            try:
                s.close()
            except OSError:
                pass

    def _accept(self) -> None:
        while not self.stopped.is_set():
            try:
                client, _ = self.listener.accept()
            except OSError:
                return
            try:
                server = socket.create_connection(self.upstream)
            except OSError:
                # The master is gone: the client sees the connection end.
                client.close()
                continue
            self.sockets += [client, server]
            threading.Thread(target=self._pump, args=(client, server), daemon=True).start()
            threading.Thread(target=self._pump, args=(server, client), daemon=True).start()

    def _pump(self, source: socket.socket, sink: socket.socket) -> None:
        while not self.stopped.is_set():
            try:
                data = source.recv(65536)
            except OSError:
                break
            if not data:
                break
            self.passing.wait()
            try:
                sink.sendall(data)
            except OSError:
                break
        for s in (source, sink):
            try:
                s.shutdown(socket.SHUT_RDWR)
            except OSError:
                pass
