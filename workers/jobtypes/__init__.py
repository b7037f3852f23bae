"""The built-in job types' handlers: one module per type, named after it, declaring its handler
with `@handler` as your modules do, its payload rules the type's contract
(contract/jobtypes/<name>.py: `@handler(SPEC.name, schema=SPEC)`).

workers.handlers.load_builtins() imports them one by one: a module that cannot import (a library
missing on this host) leaves the other types running, and its own tasks are nacked saying why.
Listing them (NAMES) imports none.
"""

from __future__ import annotations

import pkgutil

NAMES: tuple[str, ...] = tuple(
    sorted(m.name for m in pkgutil.iter_modules(__path__) if not m.name.startswith("_"))
)
