"""Pick free TCP ports on 127.0.0.1 for the lab hosts' published sshd.

Ports come from a fixed range below Linux's ephemeral range (32768+), so an outgoing connection
cannot grab a lab port between ``lab down`` and the next ``lab up``, and a host keeps its port for
as long as its container lives.
"""

from __future__ import annotations

import socket
from collections.abc import Callable, Iterable

from gpuprov.exceptions import EnvironmentMissing

#: Inclusive range the lab's ssh ports are taken from.
PORT_RANGE = (22201, 22999)


def port_is_free(port: int, address: str = "127.0.0.1") -> bool:
    """Whether a TCP listener could bind ``address:port`` right now.

    SO_REUSEADDR makes a port whose old connections linger in TIME_WAIT count as free (Docker's
    proxy binds the same way), while a live listener still makes it busy.
    """
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as sock:
        sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        try:
            sock.bind((address, port))
        except OSError:
            return False
    return True


def allocate_ports(
    count: int,
    *,
    reserved: Iterable[int] = (),
    port_range: tuple[int, int] = PORT_RANGE,
    is_free: Callable[[int], bool] | None = None,
) -> list[int]:
    """Return ``count`` distinct ports from ``port_range``, lowest first, skipping ``reserved`` ones
    and any that ``is_free`` (default :func:`port_is_free`) rejects.

    Raises :class:`~gpuprov.exceptions.EnvironmentMissing` when the range has too few free ports.
    """
    if count < 0:
        raise ValueError(f"count must be >= 0, got {count}")
    is_free = is_free or port_is_free
    taken = set(reserved)
    chosen: list[int] = []
    low, high = port_range
    for port in range(low, high + 1):
        if len(chosen) == count:
            break
        if port not in taken and is_free(port):
            chosen.append(port)
    if len(chosen) < count:
        raise EnvironmentMissing(
            f"only {len(chosen)} of {count} TCP ports free on 127.0.0.1 in {low}-{high}: "
            "stop what listens there, or run fewer lab hosts"
        )
    return chosen
