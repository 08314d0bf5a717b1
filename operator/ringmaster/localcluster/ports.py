"""Ports for the local listeners the tools start (the local Kueue's webhook and probes, the e2e
and benchmark operators' metrics and liveness).

Asking the kernel for port 0 and closing the socket is not enough when several listeners are
started in turn: the kernel may hand the same port out again before the first listener binds it
(a CI run where the operator's liveness port was the local Kueue's probe port, which answered its
readiness check while the operator itself had exited), and an outgoing connection may take a
port of the ephemeral range meanwhile. So one allocator per process never returns a port twice,
and takes it below the ephemeral range when there is room."""

from __future__ import annotations

import random
import socket
import threading
from pathlib import Path

EPHEMERAL_RANGE = Path("/proc/sys/net/ipv4/ip_local_port_range")
LINUX_DEFAULT_EPHEMERAL = (32768, 60999)
LOWEST = 10000  # clear of the well-known and most registered service ports
ATTEMPTS = 200

_given: set[int] = set()
_lock = threading.Lock()


def ephemeral_range() -> tuple[int, int]:
    try:
        low, high = EPHEMERAL_RANGE.read_text().split()
        return int(low), int(high)
    except (OSError, ValueError):
        return LINUX_DEFAULT_EPHEMERAL


def _bindable(port: int) -> bool:
    with socket.socket() as sock:
        try:
            sock.bind(("127.0.0.1", port))
        except OSError:
            return False
    return True


def free_port() -> int:
    """A port on 127.0.0.1 that nothing listens on and this process has not handed out before."""
    low, _ = ephemeral_range()
    with _lock:
        if low - LOWEST > 100:
            for _ in range(ATTEMPTS):
                port = random.randrange(LOWEST, low)
                if port not in _given and _bindable(port):
                    _given.add(port)
                    return port
        for _ in range(ATTEMPTS):  # no room below the ephemeral range: the kernel's choice
            with socket.socket() as sock:
                sock.bind(("127.0.0.1", 0))
                port = int(sock.getsockname()[1])
            if port not in _given:
                _given.add(port)
                return port
    raise OSError("no free port on 127.0.0.1")
