"""manage.py runworker: claim tasks over HTTP and run them until SIGTERM or SIGINT."""

from __future__ import annotations

import logging
import signal
from types import FrameType
from typing import Any

from django.core.management.base import CommandError, CommandParser

from contract.wording import counted
from workers import handlers, loading
from workers.client import BrokerClient
from workers.management.commands._common import (
    BrokerCommand,
    api_token,
    handler_modules,
    int_between,
    lease_ms,
    log_to_stderr,
    max_body_bytes,
    module_list,
    non_negative_int,
    positive_int,
    queue_list,
)
from workers.prefetch import DEFAULT_PREFETCH
from workers.runner import Runner

log = logging.getLogger("workers.runworker")


class Command(BrokerCommand):
    """Claim tasks from the broker over HTTP and run them. SIGTERM or SIGINT: stop claiming,
    finish the tasks in hand (prefetched ones too), settle them, exit 0; a second signal exits
    at once.
    """

    def add_arguments(self, parser: CommandParser) -> None:
        """The flags of API.md's Commands section, plus the three modes."""
        super().add_arguments(parser)
        parser.add_argument(
            "--log-file",
            default=f"./{handlers.DEFAULT_LOG_FILE}",
            help="where untyped tasks are appended (default: %(default)s)",
        )
        parser.add_argument(
            "--concurrency",
            type=positive_int,
            default=3,
            help="worker threads (default: %(default)s)",
        )
        parser.add_argument(
            "--wait-ms",
            type=non_negative_int,
            default=20000,
            help="long-poll wait per claim (default: %(default)s)",
        )
        parser.add_argument(
            "--lease-ms",
            type=lease_ms,
            default=30000,
            help="lease per claim, extended each half lease; at most 300000, "
            "the broker's cap (default: %(default)s)",
        )
        parser.add_argument(
            "--queue",
            type=queue_list,
            default=[],
            help="comma-separated queues to claim from (default: all)",
        )
        parser.add_argument(
            "--prefetch",
            type=int_between(0, 100),
            default=None,
            help="tasks held per thread at most (fewer when tasks are long), 0-100; acks "
            f"ride with the next claim (default: {DEFAULT_PREFETCH}; 0: each thread claims "
            "for itself, one task or --batch N)",
        )
        parser.add_argument(
            "--handlers",
            type=module_list,
            default=None,
            help="comma-separated modules of yours whose @handler functions this worker runs, "
            "imported from the working directory and PYTHONPATH (default: the "
            "BROKER_WORKER_HANDLERS setting or environment variable)",
        )
        parser.add_argument(
            "--no-register",
            action="store_true",
            help="do not register your handlers' job types with the broker at start "
            "(PUT /types/{name})",
        )
        parser.add_argument(
            "--batch",
            type=int_between(1, 100),
            default=1,
            help="each thread claims up to N tasks per request and a sender "
            "acks them, 1-100; instead of prefetching (default: "
            "%(default)s: prefetch mode)",
        )

    def handle(self, *args: Any, **options: Any) -> None:
        """Build the client and runner, route the signals to runner.stop(), run."""
        log_to_stderr(options["verbosity"])
        batch, prefetch = options["batch"], options["prefetch"]
        if batch > 1 and prefetch:
            raise CommandError(
                "--batch and --prefetch are two modes: give one of them", returncode=2
            )
        if prefetch is None:
            prefetch = 0 if batch > 1 else DEFAULT_PREFETCH
        try:
            client = BrokerClient(options["broker"], token=api_token())
        except ValueError as exc:
            raise CommandError(str(exc)) from exc
        modules = options["handlers"]
        try:
            loaded = loading.load(handler_modules() if modules is None else modules)
        except loading.StartupError as exc:
            raise CommandError(str(exc), returncode=1) from exc
        if not options["no_register"]:
            loading.register(client, loaded.yours)
        runner = Runner(
            client,
            resolve=handlers.Dispatch(options["log_file"]),
            concurrency=options["concurrency"],
            wait_ms=options["wait_ms"],
            lease_ms=options["lease_ms"],
            queues=options["queue"],
            batch=batch,
            prefetch=prefetch,
            max_body_bytes=max_body_bytes(),
        )

        def on_signal(signum: int, frame: FrameType | None) -> None:
            log.info("%s: finishing tasks in hand, then exiting", signal.Signals(signum).name)
            # A second signal gets the default action: the impatient can still kill at once.
            signal.signal(signal.SIGTERM, signal.SIG_DFL)
            signal.signal(signal.SIGINT, signal.SIG_DFL)
            runner.stop()

        previous = {sig: signal.signal(sig, on_signal) for sig in (signal.SIGTERM, signal.SIGINT)}
        concurrency = options["concurrency"]
        mode = (
            f"prefetch {prefetch} (up to {counted(prefetch * concurrency, 'task')} in hand)"
            if prefetch
            else f"batch {batch}"
            if batch > 1
            else "one task per claim"
        )
        log.info(
            "worker on %s: queues %s, concurrency %d, %s, wait %d ms, lease %d ms; handlers %s",
            client.shown_url,
            ",".join(options["queue"]) or "all",
            options["concurrency"],
            mode,
            options["wait_ms"],
            options["lease_ms"],
            _handlers_line(loaded),
        )
        try:
            runner.run()
        finally:
            for sig, handler in previous.items():
                signal.signal(sig, handler)
            client.close()
        log.info("worker stopped")


def _handlers_line(loaded: loading.Loaded) -> str:
    """`resize_image, thumbnail (mypkg.jobs) and 9 built-in types`: what this worker runs."""
    mine = ", ".join(f"{h.name} ({h.function.__module__})" for h in loaded.yours)
    builtin = len(handlers.jobtypes.NAMES) - len(loaded.builtin_failed)
    failed = f" ({', '.join(sorted(loaded.builtin_failed))} unavailable)"
    line = f"{builtin} built-in types{failed if loaded.builtin_failed else ''}"
    return f"{mine} and {line}" if mine else line
