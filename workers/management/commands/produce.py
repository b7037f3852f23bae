"""manage.py produce: enqueue test tasks over HTTP and print what the broker took."""

from __future__ import annotations

from typing import Any

from django.core.management.base import CommandError, CommandParser

from contract.wording import counted, nouned
from workers import producer
from workers.client import BrokerClient
from workers.management.commands._common import (
    BrokerCommand,
    api_token,
    int_between,
    log_to_stderr,
    non_negative_int,
    positive_int,
    queue_name,
    task_key,
)


class Command(BrokerCommand):
    """Enqueue test tasks (payload {"line": "hello <i>"}) over HTTP; shows a progress bar on
    stderr when it is a terminal, prints "sent N, rejected M in T s (X tasks/s)" at the end, even
    on Ctrl-C, and exits 1 unless every task was accepted (130 when interrupted).
    """

    def add_arguments(self, parser: CommandParser) -> None:
        """The flags of API.md's Commands section, plus --queue, --priority and --key."""
        super().add_arguments(parser)
        parser.add_argument(
            "-n",
            type=non_negative_int,
            default=1,
            dest="n",
            help="how many tasks (default: %(default)s)",
        )
        parser.add_argument(
            "--fail", action="store_true", help='payloads get "fail": true, so workers nack them'
        )
        parser.add_argument(
            "--max-attempts", type=positive_int, default=3, help="(default: %(default)s)"
        )
        parser.add_argument(
            "--delay-ms", type=non_negative_int, default=0, help="(default: %(default)s)"
        )
        parser.add_argument(
            "--concurrency",
            type=positive_int,
            default=1,
            help="sending threads (default: %(default)s)",
        )
        parser.add_argument(
            "--batch",
            type=int_between(1, 1000),
            default=1,
            help="tasks per request via POST /jobs/batch, 1-1000 "
            "(default: %(default)s: POST /jobs one by one)",
        )
        parser.add_argument(
            "--queue", type=queue_name, default="default", help="(default: %(default)s)"
        )
        parser.add_argument(
            "--priority",
            default="normal",
            choices=["high", "normal", "low"],
            help="(default: %(default)s)",
        )
        parser.add_argument(
            "--key",
            type=task_key,
            default=None,
            help="every task's key (a tenant's id, say), which the queue's fair, "
            "key_max_in_flight and ordered settings go by (default: none)",
        )

    def handle(self, *args: Any, **options: Any) -> None:
        """Send, show progress when stderr is a terminal, print the summary line."""
        log_to_stderr(options["verbosity"])
        n = options["n"]
        template = producer.body_template(
            fail=options["fail"],
            max_attempts=options["max_attempts"],
            delay_ms=options["delay_ms"],
            queue=options["queue"],
            priority=options["priority"],
            key=options["key"],
        )
        show = self.stderr.isatty()

        def progress(done: int) -> None:
            self.stderr.write("\r" + producer.progress_bar(done, n), style_func=str, ending="")
            self.stderr.flush()

        client = BrokerClient(options["broker"], token=api_token())
        try:
            summary = producer.produce(
                client,
                n,
                template,
                concurrency=options["concurrency"],
                batch=options["batch"],
                progress=progress if show else None,
            )
        finally:
            client.close()
        if show:
            progress(summary.sent + summary.rejected)
            self.stderr.write("", style_func=str, ending="\n")
        self.stdout.write(summary.line())
        if summary.interrupted:
            raise CommandError("interrupted", returncode=130)
        if not summary.ok:
            missed = n - summary.sent
            verb = nouned(missed, "was", "were")
            raise CommandError(
                f"{missed} of {counted(n, 'task')} {verb} not accepted", returncode=1
            )
