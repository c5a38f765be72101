"""This machine's address and interface on the route to another host (no packet is sent): what a multi-node
launch binds to, so that the other nodes can reach it."""

from __future__ import annotations

import socket


def address_towards(host: str) -> str | None:
    """This machine's address on the route to ``host``, or None when there is no route."""
    try:
        with socket.socket(socket.AF_INET, socket.SOCK_DGRAM) as sock:
            sock.connect((socket.gethostbyname(host), 9))
            return sock.getsockname()[0]
    except OSError:
        return None


def interface_towards(host: str) -> str | None:
    """The network interface this machine would use to reach ``host``, or None."""
    import psutil

    local = address_towards(host)
    if local is None:
        return None
    for name, addrs in psutil.net_if_addrs().items():
        if any(a.family == socket.AF_INET and a.address == local for a in addrs):
            return name
    return None
