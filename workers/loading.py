"""runworker's start: import the modules of handlers it was given (`--handlers`,
BROKER_WORKER_HANDLERS) and the built-in types', then register the types of yours with the broker
(PUT /types/{name}). A module of yours that cannot be used stops the start (StartupError); a
built-in one that cannot import leaves the others running."""

from __future__ import annotations

import importlib
import logging
import os
import re
import sys
import traceback
from collections.abc import Iterable, Sequence
from dataclasses import dataclass, field

from workers import handlers
from workers.client import BrokerClient, BrokerUnavailableError

log = logging.getLogger("workers.runworker")

_MODULE_RE = re.compile(r"[A-Za-z_]\w*(\.[A-Za-z_]\w*)*")


class StartupError(Exception):
    """The worker cannot start as asked; the message names the cause."""


@dataclass
class Loaded:
    """What a start loaded: your handlers by module, and the built-in types that did not load."""

    modules: dict[str, list[str]] = field(default_factory=dict)  # module → type names
    builtin_failed: dict[str, str] = field(default_factory=dict)  # type name → why

    @property
    def yours(self) -> list[handlers.Handler]:
        """Every handler declared that is not built in (those your modules imported too)."""
        return handlers.yours()


def module_names(text: str | Iterable[str]) -> list[str]:
    """`mypkg.jobs,other.module` (or a list of such) → the module names, once each, in order.

    Raises ValueError naming one that is not a dotted module name.
    """
    parts = text.split(",") if isinstance(text, str) else [p for t in text for p in t.split(",")]
    names = list(dict.fromkeys(part.strip() for part in parts if part.strip()))
    for name in names:
        if not _MODULE_RE.fullmatch(name):
            raise ValueError(f"not a module name: {name!r}")
    return names


def working_directory_on_path() -> None:
    """Put the working directory first on sys.path, as `python -m` does: the `queue-broker`
    command (a console script) and `manage.py` elsewhere would not look there."""
    here = os.getcwd()
    if not any(os.path.abspath(entry or os.curdir) == here for entry in sys.path):
        sys.path.insert(0, here)


def load(modules: Sequence[str]) -> Loaded:
    """Import the built-in types' modules, then each of `modules` (from the working directory
    and PYTHONPATH). Raises StartupError naming the module and the cause: it does not import,
    or declares a handler with a built-in type's name or one another handler has."""
    loaded = Loaded(builtin_failed=handlers.load_builtins())
    if modules:
        working_directory_on_path()
    for module in modules:
        before = set(handlers.REGISTRY)
        try:
            importlib.import_module(module)
        except handlers.HandlerDeclarationError as exc:
            raise StartupError(f"handler module {module}: {exc}") from exc
        except Exception as exc:
            raise StartupError(f"handler module {module} failed to import: {_cause(exc)}") from exc
        loaded.modules[module] = sorted(set(handlers.REGISTRY) - before)
        if not loaded.modules[module] and not any(
            h.function.__module__ == module for h in handlers.REGISTRY.values()
        ):
            log.warning("handler module %s declares no @handler", module)
    return loaded


def _cause(exc: BaseException) -> str:
    """`ModuleNotFoundError: No module named 'x'`, with where the error was raised, and where
    modules are looked for when one is not found."""
    summary = "".join(traceback.format_exception_only(exc)).strip()
    if isinstance(exc, ModuleNotFoundError):
        return f"{summary} (looked for in {os.getcwd()} and sys.path)"
    frames = traceback.extract_tb(exc.__traceback__)
    own = [f for f in frames if "importlib" not in f.filename]
    if own and not isinstance(exc, SyntaxError):
        last = own[-1]
        summary += f" (at {last.filename}, line {last.lineno})"
    return summary


def register(client: BrokerClient, mine: Sequence[handlers.Handler]) -> None:
    """PUT /types/{name} for each handler of yours: its schema, its docstring's first line. A
    refusal (a 403, a 400) is logged and the worker goes on; so is a broker that stays away,
    and then the types left are not tried."""
    for item in mine:
        body = {"schema": item.schema, "description": item.description}
        try:
            status, answer = client.put_type(item.name, body)
        except BrokerUnavailableError as exc:
            log.warning("job types not registered (%s); going on without", exc)
            return
        if status in (200, 201):
            log.info("job type %s %s", item.name, "registered" if status == 201 else "updated")
        else:
            error = answer.get("error") if isinstance(answer, dict) else None
            log.warning("job type %s not registered: the broker answered %s%s; going on",
                        item.name, status, f" ({error})" if error else "")  # fmt: skip
