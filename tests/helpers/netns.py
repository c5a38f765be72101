"""Two "hosts" on one machine: network namespaces joined by a veth pair, for multi-node tests.

The addresses come from a private /24 that exists only between the two namespaces the fixture makes, and the
namespaces are removed afterwards (also when the test fails). Where the machine does not allow creating
namespaces (no root / no CAP_NET_ADMIN), both "hosts" fall back to 127.0.0.1 and ``Hosts.isolated`` says so.
"""

from __future__ import annotations

import os
import shutil
import subprocess
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass

SUBNET = "10.213.77"


@dataclass(frozen=True)
class Hosts:
    isolated: bool  # True: two real namespaces; False: loopback fallback
    addresses: tuple[str, str]
    prefixes: tuple[list[str], list[str]]  # command prefix that runs a program "on" host 0 / host 1


def _ip(*args: str) -> subprocess.CompletedProcess:
    return subprocess.run(["ip", *args], capture_output=True, text=True)


@contextmanager
def two_hosts() -> Iterator[Hosts]:
    tag = f"pt{os.getpid() % 100000}"
    names = (f"{tag}a", f"{tag}b")
    if shutil.which("ip") is None or _ip("netns", "add", names[0]).returncode != 0:
        yield Hosts(False, ("127.0.0.1", "127.0.0.1"), ([], []))
        return
    try:
        steps = [
            ("netns", "add", names[1]),
            ("link", "add", f"{tag}va", "type", "veth", "peer", "name", f"{tag}vb"),
            ("link", "set", f"{tag}va", "netns", names[0]),
            ("link", "set", f"{tag}vb", "netns", names[1]),
        ]
        for i, (ns, dev) in enumerate(zip(names, (f"{tag}va", f"{tag}vb"), strict=True)):
            steps += [("-n", ns, "addr", "add", f"{SUBNET}.{i + 1}/24", "dev", dev),
                      ("-n", ns, "link", "set", dev, "up"), ("-n", ns, "link", "set", "lo", "up")]
        for step in steps:
            proc = _ip(*step)
            if proc.returncode != 0:
                raise RuntimeError(f"ip {' '.join(step)}: {proc.stderr.strip()}")
        yield Hosts(True, (f"{SUBNET}.1", f"{SUBNET}.2"),
                    (["ip", "netns", "exec", names[0]], ["ip", "netns", "exec", names[1]]))
    finally:
        for ns in names:  # deleting a namespace deletes its end of the veth pair, and so the pair
            _ip("netns", "del", ns)
