"""python manage.py runsweeper [--interval-ms 250] [--once]"""

from __future__ import annotations

import argparse
import logging
import signal
import threading
from typing import Any, ClassVar

from django.core import checks
from django.core.management.base import BaseCommand, CommandParser
from django.db import DatabaseError, connection

from broker.sweeper import OutageWatch, sweep_once
from contract.conf import broker_settings

log = logging.getLogger("broker.sweeper")


def _positive(text: str) -> int:
    """--interval-ms: 0 or less would spin (or, read as unset, quietly be the default)."""
    try:
        value = int(text)
    except ValueError:
        value = 0
    if value < 1:
        raise argparse.ArgumentTypeError(f"a whole number of milliseconds ≥ 1, not {text!r}")
    return value


class Command(BaseCommand):
    # The models' checks only: the URLconf's, admin's and the templates' are the web app's (it
    # warns at start, queueproject/wsgi.py; `manage.py check` runs them all), and importing them
    # here for a process that serves no page was a quarter of its start, 0.3 s of CPU.
    requires_system_checks: ClassVar[list[str]] = [checks.Tags.models]
    help = (
        "Reclaim expired leases, promote delayed tasks whose time came, fire due schedules, and"
        " wake claimers."
    )

    def add_arguments(self, parser: CommandParser) -> None:
        parser.add_argument("--interval-ms", type=_positive, default=None, metavar="MS")
        parser.add_argument("--once", action="store_true", help="Sweep once and exit.")

    def handle(self, *args: Any, **options: Any) -> None:
        interval_ms = options["interval_ms"] or broker_settings.BROKER_SWEEP_INTERVAL_MS
        if options["once"]:
            result = sweep_once(record_now=True, fire_for_s=None)
            self.stdout.write(
                f"reclaimed {result.reclaimed}, promoted {result.promoted}, pruned {result.pruned},"
                f" fired {result.fired}"
            )
            return
        stop = threading.Event()
        for sig in (signal.SIGTERM, signal.SIGINT):
            signal.signal(sig, lambda *_: stop.set())
        self.stdout.write(f"sweeper running every {interval_ms} ms")
        self.stdout.flush()
        watch = OutageWatch(interval_ms / 1000)
        while not stop.is_set():
            try:
                watch.sweep()
            except DatabaseError as exc:
                # The database went away: drop the connection and try again next tick; leases
                # that end meanwhile are held a while once it is back (OutageWatch).
                if watch.lost_since is None:
                    log.warning("sweep failed: %s", exc)
                watch.failed()
                connection.close()
            except Exception:
                # A fault in one step must not stop the rest for good (a dead sweeper reclaims
                # and promotes nothing): logged with its traceback, tried again next tick.
                log.exception("sweep failed; trying again next tick")
                connection.close()
            stop.wait(interval_ms / 1000)
        self.stdout.write("sweeper stopped")
