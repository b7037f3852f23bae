"""A name → object map filled from a package's modules on first use: how job types are found."""

from __future__ import annotations

import importlib
import pkgutil
import threading
from collections.abc import Iterable, Iterator, MutableMapping
from typing import Any, Generic, TypeVar

T = TypeVar("T")


class Registry(MutableMapping[str, T], Generic[T]):
    """name → object; the package's modules are imported on the first lookup, once.

    Each public module (not starting with "_") of `package` declares `<attr> = <kind>(...)`,
    registered under its `name`. Lazy, so importing the package stays cheap and free of cycles.
    """

    attr = "JOB_TYPE"
    kind: type = object

    def __init__(self, package: str, path: Iterable[str]) -> None:
        """package is the dotted name whose modules (on path) declare `attr`."""
        self._package, self._path = package, list(path)
        self._items: dict[str, T] = {}
        self._loaded = self._loading = False
        self._lock = threading.RLock()

    def _load(self) -> dict[str, T]:
        if not self._loaded:
            with self._lock:
                if self._loading:  # same thread: a type module used the registry while imported
                    raise RuntimeError("job type modules must not use REGISTRY at import time")
                if not self._loaded:
                    self._loading = True
                    try:
                        for name, item in discover(self._package, self._path, self.attr, self.kind):
                            add(self._items, name, item)
                    finally:
                        self._loading = False
                    self._loaded = True
        return self._items

    def __getitem__(self, name: str) -> T:
        return self._load()[name]

    def __setitem__(self, name: str, item: T) -> None:
        self._load()[name] = item

    def __delitem__(self, name: str) -> None:
        del self._load()[name]

    def __iter__(self) -> Iterator[str]:
        return iter(list(self._load()))

    def __len__(self) -> int:
        return len(self._load())

    def __repr__(self) -> str:
        return f"{type(self).__name__}({sorted(self._load())!r})"


def discover(
    package: str, path: Iterable[str], attr: str, kind: type[Any]
) -> list[tuple[str, Any]]:
    """Import every public module of package and collect its `attr`, sorted by module name.

    Raises TypeError for a module without an `attr` of `kind`: a half-written type is a bug.
    """
    found: list[tuple[str, Any]] = []
    for module_info in sorted(pkgutil.iter_modules(list(path)), key=lambda m: m.name):
        if module_info.name.startswith("_"):
            continue
        module = importlib.import_module(f"{package}.{module_info.name}")
        item: Any = getattr(module, attr, None)
        if not isinstance(item, kind):
            raise TypeError(f"{module.__name__} must define {attr} = {kind.__name__}(...)")
        found.append((item.name, item))
    return found


def add(items: MutableMapping[str, Any], name: str, item: Any) -> None:
    """items[name] = item; raises ValueError if name is already taken by another object."""
    if name in items and items[name] is not item:
        raise ValueError(f"job type already registered: {name}")
    items[name] = item
