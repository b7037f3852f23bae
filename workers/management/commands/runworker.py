"""manage.py runworker: claim tasks over HTTP and run them until SIGTERM or SIGINT."""

from __future__ import annotations

import functools
import logging
import signal
from types import FrameType
from typing import Any, ClassVar

from django.core.management.base import BaseCommand, CommandParser

from workers import handlers
from workers.client import BrokerClient
from workers.management.commands._common import (
    api_token,
    default_broker_url,
    int_between,
    log_to_stderr,
    non_negative_int,
    positive_int,
)
from workers.runner import Runner

log = logging.getLogger("workers.runworker")


class Command(BaseCommand):
    """Run worker threads; on SIGTERM/SIGINT stop claiming, finish what is in hand, exit 0."""

    help = (
        "Claim tasks from the broker over HTTP and run them. SIGTERM or SIGINT: stop claiming, "
        "finish the tasks in hand, exit 0; a second signal exits at once."
    )
    requires_system_checks: ClassVar[list[str]] = []  # no checks: HTTP only
    requires_migrations_checks = False

    def add_arguments(self, parser: CommandParser) -> None:
        """The flags of API.md's Commands section."""
        parser.add_argument("--broker", default=default_broker_url(),
                            help="broker base URL (default: $BROKER_URL or %(default)s)")
        parser.add_argument("--log-file", default=f"./{handlers.DEFAULT_LOG_FILE}",
                            help="where untyped tasks are appended (default: %(default)s)")
        parser.add_argument("--concurrency", type=positive_int, default=3,
                            help="worker threads (default: %(default)s)")
        parser.add_argument("--wait-ms", type=non_negative_int, default=20000,
                            help="long-poll wait per claim (default: %(default)s)")
        parser.add_argument("--lease-ms", type=positive_int, default=30000,
                            help="lease per claim, extended each half lease (default: %(default)s)")
        parser.add_argument("--queue", default="",
                            help="comma-separated queues to claim from (default: all)")
        parser.add_argument("--batch", type=int_between(1, 100), default=1,
                            help="claim up to N tasks per request and ack in batches, 1-100 "
                                 "(default: %(default)s: one at a time)")

    def handle(self, *args: Any, **options: Any) -> None:
        """Build the client and runner, route the signals to runner.stop(), run."""
        log_to_stderr(options["verbosity"])
        client = BrokerClient(options["broker"], token=api_token())
        runner = Runner(
            client,
            resolve=functools.partial(handlers.resolve, log_file=options["log_file"]),
            concurrency=options["concurrency"],
            wait_ms=options["wait_ms"],
            lease_ms=options["lease_ms"],
            queues=[q.strip() for q in options["queue"].split(",") if q.strip()],
            batch=options["batch"],
        )

        def on_signal(signum: int, frame: FrameType | None) -> None:
            log.info("%s: finishing tasks in hand, then exiting", signal.Signals(signum).name)
            # A second signal gets the default action: the impatient can still kill at once.
            signal.signal(signal.SIGTERM, signal.SIG_DFL)
            signal.signal(signal.SIGINT, signal.SIG_DFL)
            runner.stop()

        previous = {sig: signal.signal(sig, on_signal) for sig in (signal.SIGTERM, signal.SIGINT)}
        log.info(
            "worker on %s: %d threads, batch %d, wait %d ms, lease %d ms, queues %s",
            options["broker"], options["concurrency"], options["batch"], options["wait_ms"],
            options["lease_ms"], options["queue"] or "all",
        )
        try:
            runner.run()
        finally:
            for sig, handler in previous.items():
                signal.signal(sig, handler)
            client.close()
        log.info("worker stopped")
