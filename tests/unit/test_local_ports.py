"""The local listeners' ports: never the same twice in one process (the e2e operator's liveness
port was once the local Kueue's probe port), and below the ephemeral range when there is room."""

from __future__ import annotations

import socket
from pathlib import Path

import pytest

from ringmaster.localcluster import ports


def test_ports_are_never_handed_out_twice_and_are_bindable() -> None:
    given = [ports.free_port() for _ in range(300)]
    assert len(set(given)) == len(given)
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", given[-1]))


def test_ports_come_from_below_the_ephemeral_range(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    fake = tmp_path / "ip_local_port_range"
    fake.write_text("32768\t60999\n")
    monkeypatch.setattr(ports, "EPHEMERAL_RANGE", fake)
    assert ports.ephemeral_range() == (32768, 60999)
    assert all(ports.LOWEST <= ports.free_port() < 32768 for _ in range(50))


def test_without_room_below_the_ephemeral_range_the_kernel_chooses(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    fake = tmp_path / "ip_local_port_range"
    fake.write_text("1024 65000\n")
    monkeypatch.setattr(ports, "EPHEMERAL_RANGE", fake)
    given = [ports.free_port() for _ in range(50)]
    assert len(set(given)) == 50
    assert all(port >= 1024 for port in given)


def test_a_port_something_listens_on_is_not_handed_out(monkeypatch: pytest.MonkeyPatch) -> None:
    with socket.socket() as listener:
        listener.bind(("127.0.0.1", 0))
        listener.listen()
        taken = listener.getsockname()[1]
        monkeypatch.setattr(ports.random, "randrange", lambda low, high: taken)
        monkeypatch.setattr(ports, "ATTEMPTS", 3)
        fake_low = taken + 200
        monkeypatch.setattr(ports, "ephemeral_range", lambda: (fake_low, 65000))
        port = ports.free_port()  # falls back to the kernel's choice
        assert port != taken
