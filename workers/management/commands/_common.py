"""What runworker, produce and submit share: the base command, argument types, logging."""

from __future__ import annotations

import argparse
import logging
import os
from collections.abc import Callable
from typing import Any, ClassVar

from django.core.management.base import BaseCommand, CommandError, CommandParser

from contract.limits import MAX_KEY, QUEUE_MESSAGE, QUEUE_RE
from workers import loading, transport
from workers.client import DEFAULT_BROKER_URL
from workers.wire import DEFAULT_MAX_BODY_BYTES, MAX_LEASE_MS


class BrokerCommand(BaseCommand):
    """A command that talks to the broker over HTTP only: no system checks, no database.

    Its --help text is its class docstring.
    """

    requires_system_checks: ClassVar[list[str]] = []
    requires_migrations_checks = False

    def __init_subclass__(cls, **kwargs: Any) -> None:
        super().__init_subclass__(**kwargs)
        cls.help = " ".join((cls.__doc__ or "").split())

    def add_arguments(self, parser: CommandParser) -> None:
        parser.add_argument(
            "--broker",
            type=broker_url,
            default=default_broker_url(),  # a string: argparse checks it with `type` too
            help="broker base URL (default: $BROKER_URL or %(default)s)",
        )


def broker_url(text: str) -> str:
    """argparse type: http(s)://host[:port][/prefix], as the client takes it; anything else is
    a usage error, not a traceback when the client is made."""
    try:
        transport.broker_url(text)
    except ValueError as exc:
        raise argparse.ArgumentTypeError(str(exc)) from None
    return text


def queue_name(text: str) -> str:
    """argparse type: one queue name as the broker names queues."""
    if not QUEUE_RE.fullmatch(text):
        raise argparse.ArgumentTypeError(f"not a queue name ({QUEUE_MESSAGE}): {text[:70]!r}")
    return text


def default_broker_url() -> str:
    """BROKER_URL from the environment, else the local default."""
    return os.environ.get("BROKER_URL") or DEFAULT_BROKER_URL


def api_token() -> str | None:
    """BROKER_API_TOKEN from the environment, sent as a bearer token when set."""
    return os.environ.get("BROKER_API_TOKEN") or None


def max_body_bytes() -> int:
    """BROKER_MAX_BODY_BYTES from the environment (the broker's own setting), else its default."""
    raw = os.environ.get("BROKER_MAX_BODY_BYTES", "")
    return int(raw) if raw.strip().isdigit() else DEFAULT_MAX_BODY_BYTES


def lease_ms(text: str) -> int:
    """argparse type: a lease from 1 ms up to the broker's cap (it would grant no more)."""
    value = _int_at_least(text, 1)
    if value > MAX_LEASE_MS:
        raise argparse.ArgumentTypeError(
            f"must be at most {MAX_LEASE_MS} (the broker caps every lease there): {value}"
        )
    return value


def task_key(text: str) -> str:
    """argparse type: a task's key as POST /jobs takes it, 1 to MAX_KEY characters."""
    if not 0 < len(text) <= MAX_KEY or "\x00" in text:
        raise argparse.ArgumentTypeError(f"a key is 1 to {MAX_KEY} characters: {text[:40]!r}")
    return text


def queue_list(text: str) -> list[str]:
    """argparse type: comma-separated queue names, each as the broker names queues, once each; a
    bad name is a usage error, not a claim the broker refuses forever. So is a list with no name
    (`--queue "$QUEUES"` with the variable unset): the flag left out means every queue, and a
    worker must not drain every queue because a list came out empty."""
    names = list(dict.fromkeys(name.strip() for name in text.split(",") if name.strip()))
    if not names:
        raise argparse.ArgumentTypeError("no queue named (leave --queue out for every queue)")
    return [queue_name(name) for name in names]


def positive_int(text: str) -> int:
    """argparse type: an integer >= 1."""
    return _int_at_least(text, 1)


def non_negative_int(text: str) -> int:
    """argparse type: an integer >= 0."""
    return _int_at_least(text, 0)


def int_between(low: int, high: int) -> Callable[[str], int]:
    """argparse type: an integer from low to high."""

    def parse(text: str) -> int:
        value = _int_at_least(text, low)
        if value > high:
            raise argparse.ArgumentTypeError(f"must be at most {high}: {value}")
        return value

    return parse


def _int_at_least(text: str, low: int) -> int:
    try:
        value = int(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"not an integer: {text!r}") from None
    if value < low:
        raise argparse.ArgumentTypeError(f"must be at least {low}: {value}")
    return value


def module_list(text: str) -> list[str]:
    """argparse type: comma-separated module names (`mypkg.jobs,other.module`)."""
    try:
        return loading.module_names(text)
    except ValueError as exc:
        raise argparse.ArgumentTypeError(str(exc)) from None


def handler_modules() -> list[str]:
    """The modules runworker imports without --handlers: the project's BROKER_WORKER_HANDLERS
    setting when it names one (a list, or a comma-separated string), else the environment
    variable of that name. Raises CommandError for a name that is not a module's."""
    from django.conf import settings

    from contract.conf import broker_settings

    configured = broker_settings.BROKER_WORKER_HANDLERS if settings.configured else None
    raw = configured or os.environ.get("BROKER_WORKER_HANDLERS", "")
    try:
        return loading.module_names(raw)
    except ValueError as exc:
        raise CommandError(f"BROKER_WORKER_HANDLERS: {exc}") from None


def log_to_stderr(verbosity: int) -> None:
    """Send the workers.* lines to stderr unless the project's LOGGING already routes them.

    Whatever the project's levels, runworker's own lines (the start line, the stop) show at the
    default verbosity, and failures are WARNING lines: `-v 0` hides the start line.
    """
    own = logging.getLogger("workers.runworker")
    if own.level == logging.NOTSET:
        own.setLevel(logging.INFO if verbosity >= 1 else logging.WARNING)
    logger = logging.getLogger("workers")
    if logger.hasHandlers():
        return  # LOGGING in settings decides, levels included
    handler = logging.StreamHandler()  # stderr
    handler.setFormatter(
        logging.Formatter("%(asctime)s %(levelname)s %(threadName)s %(name)s: %(message)s")
    )
    logger.addHandler(handler)
    if logger.level == logging.NOTSET:
        levels = {0: logging.WARNING, 1: logging.INFO}
        logger.setLevel(levels.get(verbosity, logging.DEBUG))
