"""Ports for the local listeners the tools start (the local cluster's own components, the local
Kueue's webhook and probes, the e2e and benchmark operators' metrics and liveness).

Asking the kernel for port 0 and closing the socket is not enough when several listeners are
started in turn: the kernel may hand the same port out again before the first listener binds it
(a CI run where the operator's liveness port was the local Kueue's probe port, which answered its
readiness check while the operator itself had exited), and an outgoing connection may take a
port of the ephemeral range meanwhile. So one allocator per process never returns a port twice,
and takes it below the ephemeral range when there is room.

Several processes allocate at once too (the test suite's workers, each with its own cluster, its
own operators and its own Kueue; two checkouts on one machine): each port handed out is also
reserved machine-wide, by a lock on its byte of one shared file, held until the process exits.
Another process never hands out a port that is reserved, so a port given to a listener that has
not bound it yet is not given twice. kwokctl picks its own ports counting down from 32767: the
1024 ports below 32768 are left to it."""

from __future__ import annotations

import fcntl
import os
import random
import socket
import tempfile
import threading
from pathlib import Path

EPHEMERAL_RANGE = Path("/proc/sys/net/ipv4/ip_local_port_range")
LINUX_DEFAULT_EPHEMERAL = (32768, 60999)
LOWEST = 10000  # clear of the well-known and most registered service ports
# kwokctl (sigs.k8s.io/kwok pkg/utils/net) hands out 32766, 32765, ... to a cluster's components
# when none are given: never ours, so a kwokctl run by hand cannot take a port we gave out.
KWOKCTL_PORTS = range(32768 - 1024, 32768)
ATTEMPTS = 200
# One byte per port of this file, locked (fcntl record locks: released when the process exits,
# however it exits) by the process that handed the port out.
RESERVATIONS = Path(tempfile.gettempdir()) / "ringmaster-ports.lock"

_given: set[int] = set()
_lock = threading.Lock()
_reservations: int | None = None  # the file's descriptor, open for the process's lifetime


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


def _reservations_fd() -> int | None:
    """The shared reservations file, opened once (None where it cannot be: then ports are
    unique within the process only). Never closed: closing any descriptor of a file drops the
    process's record locks on it."""
    global _reservations
    if _reservations is None:
        try:
            _reservations = os.open(RESERVATIONS, os.O_RDWR | os.O_CREAT | os.O_CLOEXEC, 0o666)
        except OSError:
            return None
    return _reservations


def _reserve(port: int) -> bool:
    """Lock the port's byte of the shared file; False if another process holds it."""
    fd = _reservations_fd()
    if fd is None:
        return True
    try:
        fcntl.lockf(fd, fcntl.LOCK_EX | fcntl.LOCK_NB, 1, port)
    except OSError:
        return False
    return True


def _take(port: int) -> bool:
    if port in _given or not _bindable(port) or not _reserve(port):
        return False
    _given.add(port)
    return True


def free_port() -> int:
    """A port on 127.0.0.1 that nothing listens on, that this process has not handed out before
    and that no other process running now has handed out."""
    low, _ = ephemeral_range()
    with _lock:
        if low - LOWEST > 100:
            for _ in range(ATTEMPTS):
                port = random.randrange(LOWEST, low)
                if port not in KWOKCTL_PORTS and _take(port):
                    return port
        for _ in range(ATTEMPTS):  # no room below the ephemeral range: the kernel's choice
            with socket.socket() as sock:
                sock.bind(("127.0.0.1", 0))
                port = int(sock.getsockname()[1])
            if _take(port):
                return port
    raise OSError("no free port on 127.0.0.1")
