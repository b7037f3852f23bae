"""`make run` in a terminal, as a newcomer runs it: it prints the address to open once the broker
answers there, and Ctrl-C stops the broker and the sweeper and ends make with status 0, quietly,
leaving no process behind. Driven through a pseudo-terminal whose Ctrl-C (the byte 0x03) the
kernel turns into SIGINT for the terminal's foreground process group, as it does for a person."""

from __future__ import annotations

import fcntl
import os
import pty
import re
import shutil
import subprocess
import termios
import threading
import time
import urllib.request
from pathlib import Path

import pytest

from tests.e2e.test_dev_mode import _fresh_env
from tests.procs import ROOT, free_port, needs, wait_until

pytestmark = pytest.mark.e2e
CTRL_C = b"\x03"


class Terminal:
    """A pseudo-terminal: what `args` write to it is collected; keys are typed into it."""

    def __init__(self, args: list[str], env: dict[str, str]) -> None:
        master, slave = pty.openpty()
        self.master, self.output, self._lock = master, bytearray(), threading.Lock()
        self.proc = subprocess.Popen(
            args, cwd=ROOT, env=env, stdin=slave, stdout=slave, stderr=slave,
            start_new_session=True,  # a session of its own, this terminal its controlling one
            preexec_fn=lambda: fcntl.ioctl(0, termios.TIOCSCTTY, 0),
        )  # fmt: skip
        os.close(slave)
        self._reader = threading.Thread(target=self._read, daemon=True)
        self._reader.start()

    def _read(self) -> None:
        while True:
            try:
                chunk = os.read(self.master, 4096)
            except OSError:  # the last process holding the terminal is gone
                return
            if not chunk:
                return
            with self._lock:
                self.output += chunk

    def text(self) -> str:
        with self._lock:
            return self.output.decode(errors="replace")

    def type(self, keys: bytes) -> None:
        os.write(self.master, keys)

    def close(self) -> None:
        if self.proc.poll() is None:
            os.killpg(self.proc.pid, 9)
            self.proc.wait(10)
        os.close(self.master)


def _session_members(sid: int) -> list[str]:
    """Live (not zombie) processes of session `sid`: 'pid command'."""
    found = []
    for entry in Path("/proc").iterdir():
        if not entry.name.isdigit():
            continue
        try:
            stat = (entry / "stat").read_text()
        except OSError:
            continue
        # pid (comm) state ppid pgrp session ...: comm may hold spaces, so split after it.
        comm = stat[stat.index("(") + 1 : stat.rindex(")")]
        state, _ppid, _pgrp, session = stat[stat.rindex(")") + 2 :].split()[:4]
        if int(session) == sid and state != "Z":
            found.append(f"{entry.name} {comm}")
    return found


def test_make_run__prints_the_address__ctrl_c_stops_both_exit_0(tmp_path: Path) -> None:
    needs(shutil.which("make"), "needs make")
    port = free_port()
    env = _fresh_env(
        DATABASE_URL=f"sqlite:///{tmp_path / 'db.sqlite3'}",
        BROKER_BIND=f"127.0.0.1:{port}", WEB_CONCURRENCY="2", GUNICORN_THREADS="8", TERM="dumb",
    )  # fmt: skip
    terminal = Terminal(["make", "--no-print-directory", "run"], env)
    address = f"http://127.0.0.1:{port}/"
    try:

        def printed() -> bool:
            assert terminal.proc.poll() is None, terminal.text()
            return address in terminal.text()

        wait_until(printed, 120, 0.1, f"make run to print {address}")
        # Printed once it listens: the address answers at once.
        with urllib.request.urlopen(f"{address}healthz", timeout=5) as answer:  # noqa: S310
            assert answer.status == 200
        members = _session_members(terminal.proc.pid)
        assert any("gunicorn" in m for m in members) and len(members) >= 4, members
        assert re.search(r"open http://127\.0\.0\.1:\d+/ \(Ctrl-C stops it\)", terminal.text())

        terminal.type(CTRL_C)
        status = terminal.proc.wait(60)

        assert status == 0, terminal.text()[-3000:]
        assert "make: ***" not in terminal.text() and "Error" not in terminal.text()
        assert "Traceback" not in terminal.text()
        wait_until(lambda: not _session_members(terminal.proc.pid), 5, 0.1, "no process left")
        with pytest.raises(OSError):
            urllib.request.urlopen(f"{address}healthz", timeout=2)  # noqa: S310
    finally:
        terminal.close()


def test_make_run__port_taken__make_fails_and_stops_the_sweeper(tmp_path: Path) -> None:
    needs(shutil.which("make"), "needs make")
    import socket

    with socket.socket() as taken:
        taken.bind(("127.0.0.1", 0))
        taken.listen()
        port = taken.getsockname()[1]
        env = _fresh_env(
            DATABASE_URL=f"sqlite:///{tmp_path / 'db.sqlite3'}",
            BROKER_BIND=f"127.0.0.1:{port}", WEB_CONCURRENCY="1", GUNICORN_THREADS="4",
        )  # fmt: skip
        terminal = Terminal(["make", "--no-print-directory", "run"], env)
        try:
            status = terminal.proc.wait(120)
            assert status != 0
            # make's last line may still be on its way through the terminal when it exits.
            wait_until(lambda: "make: ***" in terminal.text(), 5, 0.05, "make's error line")
            assert "The broker is up" not in terminal.text()  # the port answers, not the broker
            deadline = time.monotonic() + 5
            while _session_members(terminal.proc.pid) and time.monotonic() < deadline:
                time.sleep(0.1)
            assert _session_members(terminal.proc.pid) == []
        finally:
            terminal.close()
