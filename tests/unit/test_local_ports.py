"""The local listeners' ports: never the same twice in one process (the e2e operator's liveness
port was once the local Kueue's probe port), nor to two processes at once (the suite's workers),
and below the ephemeral range when there is room."""

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


def test_a_port_another_process_holds_is_not_handed_out(monkeypatch: pytest.MonkeyPatch) -> None:
    """The suite's workers each start operators, a cluster and a Kueue at once: a port one of
    them was given, and has not bound yet, is never given to another."""
    import subprocess
    import sys

    holder = subprocess.Popen(
        [
            sys.executable,
            "-c",
            "import sys\n"
            "from ringmaster.localcluster.ports import free_port\n"
            "print(free_port(), flush=True)\n"
            "sys.stdin.read()\n",
        ],
        stdin=subprocess.PIPE,
        stdout=subprocess.PIPE,
        text=True,
    )
    try:
        assert holder.stdout is not None
        held = int(holder.stdout.readline())
        monkeypatch.setattr(ports.random, "randrange", lambda low, high: held)
        monkeypatch.setattr(ports, "ATTEMPTS", 3)
        assert ports._bindable(held)  # nobody listens on it: only the reservation keeps it
        assert ports.free_port() != held  # the kernel's choice, after three draws of `held`
    finally:
        assert holder.stdin is not None
        holder.stdin.close()
        holder.wait(timeout=30)
    # Once the process that held it is gone, the port may be handed out again.
    monkeypatch.setattr(ports.random, "randrange", lambda low, high: held)
    assert ports.free_port() == held


def test_ports_stay_clear_of_the_ones_kwokctl_picks_itself() -> None:
    given = [ports.free_port() for _ in range(300)]
    assert not [port for port in given if port in ports.KWOKCTL_PORTS]
    assert 32767 in ports.KWOKCTL_PORTS and 32766 in ports.KWOKCTL_PORTS


def test_the_local_clusters_components_get_their_ports_from_the_allocator() -> None:
    """kwokctl would give two clusters created at once the same ports (it counts down from
    32767 in each process): the components' ports are given in its configuration."""
    import yaml

    from ringmaster.localcluster.cluster import KWOKCTL_PORT_OPTIONS, kwokctl_configuration

    chosen = {key: ports.free_port() for key in KWOKCTL_PORT_OPTIONS}
    document = yaml.safe_load(kwokctl_configuration(chosen))
    assert document["kind"] == "KwokctlConfiguration"
    assert document["options"] == chosen
    assert {"etcdPort", "kubeApiserverPort", "kwokControllerPort"} <= set(document["options"])
    assert document["componentsPatches"]  # the leader-election settings are still there
