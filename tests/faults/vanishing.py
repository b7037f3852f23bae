"""A PostgreSQL host that can vanish as a host does in a power cut or a network partition: its
packets stop, and nothing (no FIN, no RST) tells the broker's connections so.

A network namespace plays the host: a veth pair joins it to this one, and inside it a forwarder
listens on 5432 and passes connections to a proxy here, in front of the shared PostgreSQL. To
vanish, the namespace's end of the link goes down, its forwarder is killed (its FINs are lost on
the down link) and the proxy here closes its connections (PostgreSQL rolls back what they had
open, as a dead primary's sessions are gone). A proxy cut (tests/proxy.py) or a killed
PostgreSQL sends FIN or RST at once; this one does not. Needs root (`ip netns`).
"""

from __future__ import annotations

import os
import shutil
import signal
import subprocess
import sys
from pathlib import Path

from tests.procs import ROOT
from tests.proxy import Proxy


def can_vanish() -> str | None:
    """Why this machine cannot make a host vanish, or None."""
    if os.geteuid() != 0:
        return "making a host vanish needs root (ip netns)"
    if shutil.which("ip") is None:
        return "making a host vanish needs iproute2's ip"
    return None


class VanishingHost:
    """`host`:5432 leads to PostgreSQL at (pg_host, pg_port) until `vanish()`."""

    def __init__(self, pg_host: str, pg_port: int, log: Path) -> None:
        n = os.getpid() % 16384
        self.ns = f"brokervanish{os.getpid()}"
        self._veth = (f"bv{n}a", f"bv{n}b")
        # A /30 of its own, by pid: its two addresses, this end's and the host's.
        self._here, self.host = (f"10.213.{n >> 6}.{((n & 63) << 2) + k}" for k in (1, 2))
        self._log = log
        self._proxy: Proxy | None = None
        self._forwarder: subprocess.Popen[bytes] | None = None
        self._pg = (pg_host, pg_port)

    def __enter__(self) -> VanishingHost:
        try:
            self._start()
        except BaseException:
            self.close()
            raise
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    def _start(self) -> None:
        here, there = self._veth
        _ip("netns", "add", self.ns)
        _ip("link", "add", here, "type", "veth", "peer", "name", there)
        _ip("link", "set", there, "netns", self.ns)
        _ip("addr", "add", f"{self._here}/30", "dev", here)
        _ip("link", "set", here, "up")
        _ip("-n", self.ns, "addr", "add", f"{self.host}/30", "dev", there)
        _ip("-n", self.ns, "link", "set", there, "up")
        _ip("-n", self.ns, "link", "set", "lo", "up")
        self._proxy = Proxy(*self._pg, bind=self._here)
        with open(self._log, "ab") as out:
            forward = [f"{self.host}:5432", f"{self._here}:{self._proxy.port}"]
            self._forwarder = subprocess.Popen(
                ["ip", "netns", "exec", self.ns, sys.executable, str(ROOT / "tests" / "proxy.py"),
                 *forward],
                stdout=subprocess.PIPE,
                stderr=out,
            )  # fmt: skip
        assert self._forwarder.stdout is not None
        line = self._forwarder.stdout.readline()
        if b"listening" not in line:
            raise RuntimeError(f"the forwarder in {self.ns} did not start; see {self._log}")

    def vanish(self) -> None:
        """The host is gone: no packet to or from it any more, and its sessions end."""
        _ip("-n", self.ns, "link", "set", self._veth[1], "down")
        if self._forwarder is not None:
            self._forwarder.send_signal(signal.SIGKILL)
            self._forwarder.wait(10)
        if self._proxy is not None:
            self._proxy.down()

    def close(self) -> None:
        if self._forwarder is not None:
            if self._forwarder.poll() is None:
                self._forwarder.kill()
                self._forwarder.wait(10)
            if self._forwarder.stdout is not None:
                self._forwarder.stdout.close()
        if self._proxy is not None:
            self._proxy.close()
        subprocess.run(["ip", "netns", "del", self.ns], capture_output=True, check=False)
        subprocess.run(["ip", "link", "del", self._veth[0]], capture_output=True, check=False)


def _ip(*args: str) -> None:
    subprocess.run(["ip", *args], check=True, capture_output=True, timeout=10)
