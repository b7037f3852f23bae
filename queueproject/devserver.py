"""`make run`'s two processes, the broker (gunicorn) and the sweeper, in the foreground.

Prints the address to open once the broker listens. Ctrl-C stops both and `make run` ends with
status 0: make kills itself with the signal it gets (so any Ctrl-C it sees ends it with 130), so
in a terminal this process takes the terminal's foreground for its own process group, where
Ctrl-C reaches it and its two children but not make, and hands the terminal back on its way out.
"""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
import urllib.error
import urllib.request
from pathlib import Path
from types import FrameType

POLL_S = 0.1
# gunicorn.conf.py's graceful_timeout (35 s) for a SIGTERM, then a margin; Ctrl-C is at once.
STOP_WAIT_S = 40
DEFAULT_BIND = "127.0.0.1:8080"
WILDCARDS = {"0.0.0.0": "127.0.0.1", "[::]": "[::1]", "": "127.0.0.1"}  # noqa: S104 -- a mapping


class Foreground:
    """Holds the terminal's foreground for this process's own group, if it is run from one."""

    def __init__(self) -> None:
        self.previous: int | None = None

    def take(self) -> None:
        if not os.isatty(0) or os.tcgetpgrp(0) != os.getpgrp():
            return  # no terminal, or run in the background: nothing to take
        previous = os.getpgrp()
        try:
            os.setpgid(0, 0)
            os.tcsetpgrp(0, os.getpgrp())  # SIGTTOU ignored: allowed from a background group
        except OSError:
            return  # a session leader (setsid) cannot move: Ctrl-C then reaches make too
        self.previous = previous

    def give_back(self) -> None:
        if self.previous is not None:
            try:
                os.tcsetpgrp(0, self.previous)
            except OSError:
                pass  # make is gone, or the terminal: nothing to hand back
            self.previous = None


def address(bind: str) -> str | None:
    """BROKER_BIND → the URL to open (on loopback for a wildcard address); None for a Unix
    socket."""
    host, _, port = bind.rpartition(":")
    if bind.startswith("unix:") or not port.isdigit():
        return None
    return f"http://{WILDCARDS.get(host, host)}:{port}/"


def answering(url: str) -> bool:
    """The broker answers at `url`: its /healthz, 200 or 503 (then the database is away), not
    any program that took the port."""
    try:
        with urllib.request.urlopen(f"{url}healthz", timeout=1) as answer:  # noqa: S310
            body = answer.read()
    except urllib.error.HTTPError as refused:
        body = refused.read()
    except (OSError, ValueError):
        return False
    try:
        return "status" in json.loads(body)
    except (ValueError, TypeError):
        return False


class Run:
    """The two children, the signal that asks them to stop, and the end."""

    def __init__(self) -> None:
        self.asked: int | None = None  # the signal that asked for the stop
        self.children: tuple[subprocess.Popen[bytes], ...] = ()

    def ask(self, signum: int, frame: FrameType | None) -> None:
        self.asked = signum

    def start(self) -> None:
        """The sweeper, then gunicorn (gunicorn.conf.py: BROKER_BIND and the rest)."""
        python = Path(sys.executable)
        # A process group of its own: the terminal's Ctrl-C reaches only this process, which
        # stops the sweeper with SIGTERM (a SIGINT that came while it was still starting up was
        # a KeyboardInterrupt traceback on the terminal).
        self.sweeper = subprocess.Popen(  # noqa: S603
            [python, "manage.py", "runsweeper"], process_group=0
        )
        self.web = subprocess.Popen([python.parent / "gunicorn"])  # noqa: S603
        self.children = (self.sweeper, self.web)

    def watch(self, bind: str) -> int:
        """Until asked to stop or a child ends: print the address once it answers."""
        url = address(bind)
        shown = url is None
        while self.asked is None and all(c.poll() is None for c in self.children):
            if not shown and url is not None and answering(url):
                sys.stdout.write(f"\nThe broker is up: open {url} (Ctrl-C stops it)\n\n")
                sys.stdout.flush()
                shown = True
            time.sleep(POLL_S)
        failed = self.asked is None
        self.stop()
        if not failed:
            return 0
        return next((c.returncode for c in self.children if c.returncode), 1)

    def stop(self) -> None:
        """Ctrl-C: the web server stops at once (SIGINT), the sweeper after its tick; anything
        else (SIGTERM, a child that ended): the web server's graceful stop (SIGTERM)."""
        web_signal = signal.SIGINT if self.asked == signal.SIGINT else signal.SIGTERM
        for child, sig in ((self.web, web_signal), (self.sweeper, signal.SIGTERM)):
            if child.poll() is None:
                child.send_signal(sig)
        deadline = time.monotonic() + STOP_WAIT_S
        for child in self.children:
            try:
                child.wait(max(0.0, deadline - time.monotonic()))
            except subprocess.TimeoutExpired:
                child.kill()
                child.wait()


def main() -> int:
    # Ignored here and so in the children: Ctrl-Z would stop this group while make, outside it,
    # waits on; a write to the terminal from a background group must not stop anyone either.
    for sig in (signal.SIGTSTP, signal.SIGTTIN, signal.SIGTTOU):
        signal.signal(sig, signal.SIG_IGN)
    foreground = Foreground()
    foreground.take()
    try:
        run = Run()
        for sig in (signal.SIGINT, signal.SIGTERM, signal.SIGHUP):
            signal.signal(sig, run.ask)  # before the children: none is left behind
        run.start()
        return run.watch(os.environ.get("BROKER_BIND", DEFAULT_BIND))
    finally:
        foreground.give_back()


if __name__ == "__main__":
    sys.exit(main())
