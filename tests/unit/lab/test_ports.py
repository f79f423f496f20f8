"""Port allocation for the lab hosts' published sshd."""

from __future__ import annotations

import socket

import pytest

from gpuprov.exceptions import EnvironmentMissing
from gpuprov.lab.ports import PORT_RANGE, allocate_ports, port_is_free


def test_lowest_free_ports_first() -> None:
    assert allocate_ports(3, port_range=(100, 200), is_free=lambda p: True) == [100, 101, 102]


def test_skips_reserved_and_busy_ports() -> None:
    busy = {101, 103}
    ports = allocate_ports(3, reserved={100}, port_range=(100, 200), is_free=lambda p: p not in busy)
    assert ports == [102, 104, 105]


def test_zero_ports() -> None:
    assert allocate_ports(0, is_free=lambda p: True) == []


def test_negative_count_is_a_bug() -> None:
    with pytest.raises(ValueError):
        allocate_ports(-1)


def test_exhausted_range_raises_environment_missing() -> None:
    with pytest.raises(EnvironmentMissing, match="only 1 of 2") as err:
        allocate_ports(2, port_range=(100, 102), reserved={100}, is_free=lambda p: p != 102)
    assert err.value.exit_code == 4


def test_range_is_below_the_ephemeral_range() -> None:
    low, high = PORT_RANGE
    assert 1024 < low < high < 32768


def test_port_is_free_sees_a_listener() -> None:
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as sock:
        sock.bind(("127.0.0.1", 0))
        sock.listen(1)
        port = sock.getsockname()[1]
        assert not port_is_free(port)


def test_real_allocation_gives_bindable_distinct_ports() -> None:
    ports = allocate_ports(2)
    assert len(set(ports)) == 2 and all(port_is_free(p) for p in ports)
