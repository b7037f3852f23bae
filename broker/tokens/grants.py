"""Grants: `<actions>:<queue pattern>`, and what a caller holding some may do."""

from __future__ import annotations

import re
from dataclasses import dataclass, field
from fnmatch import fnmatchcase

ACTIONS = ("produce", "consume", "read", "manage")
EVERY = "*"
# A queue name's characters and fnmatch's wildcards `*` and `?` (not `[...]`: docs/tenants.md).
_PATTERN_RE = re.compile(r"[A-Za-z0-9_.\-*?]{1,64}")
_WILD = re.compile(r"[*?]")


class GrantError(ValueError):
    """A grant that does not parse; the message says why."""


@dataclass(frozen=True, slots=True)
class Grant:
    actions: frozenset[str]
    pattern: str

    def covers(self, action: str, queue: str) -> bool:
        return action in self.actions and fnmatchcase(queue, self.pattern)

    def __str__(self) -> str:
        return f"{'+'.join(a for a in ACTIONS if a in self.actions)}:{self.pattern}"


def parse(text: str) -> Grant:
    """`produce+consume:tenant-a.*` → a Grant; GrantError says what is wrong."""
    if not isinstance(text, str) or ":" not in text:
        raise GrantError(f"{text!r}: a grant is <actions>:<queue pattern>, e.g. produce:orders.*")
    actions_text, _, pattern = text.partition(":")
    names = actions_text.split("+")
    if names == ["all"]:
        names = list(ACTIONS)
    unknown = [n for n in names if n not in ACTIONS]
    if unknown or not actions_text:
        raise GrantError(f"{text!r}: actions are {', '.join(ACTIONS)} joined by '+', or all")
    if not _PATTERN_RE.fullmatch(pattern):
        raise GrantError(
            f"{text!r}: the pattern is a glob over queue names (letters, digits, _ . -, and"
            " * ?), 1 to 64 characters"
        )
    return Grant(frozenset(names), pattern)


def parse_all(texts: list[str]) -> tuple[Grant, ...]:
    return tuple(parse(t) for t in texts)


def is_literal(pattern: str) -> bool:
    return not _WILD.search(pattern)


@dataclass(frozen=True, slots=True)
class Access:
    """What one request may do. `everything`: an env token (BROKER_API_TOKENS), an SQS key of
    BROKER_SQS_CREDENTIALS, or an open broker; else a database token's grants."""

    everything: bool = False
    grants: tuple[Grant, ...] = ()
    name: str | None = None  # the database token's name (tasks' enqueued_by)
    token_id: int | None = None
    _everywhere: frozenset[str] = field(default=frozenset(), compare=False)

    @classmethod
    def of_token(cls, token_id: int, name: str, grants: tuple[Grant, ...]) -> Access:
        everywhere = frozenset(a for g in grants if g.pattern == EVERY for a in g.actions)
        return cls(False, grants, name, token_id, everywhere)

    def may(self, action: str, queue: str) -> bool:
        """Whether this caller may do `action` on `queue`."""
        return self.everything or any(g.covers(action, queue) for g in self.grants)

    def may_everywhere(self, action: str) -> bool:
        """Whether it holds `action` on `*` (every queue, and what belongs to none)."""
        return self.everything or action in self._everywhere

    def may_somewhere(self, action: str) -> bool:
        return self.everything or any(action in g.actions for g in self.grants)

    def knows(self, queue: str) -> bool:
        """Whether any of its grants names `queue`: if none does, that queue's tasks do not
        exist for it (a 404 as for an unknown id, never a 403)."""
        return self.everything or any(fnmatchcase(queue, g.pattern) for g in self.grants)

    def patterns(self, action: str) -> list[str] | None:
        """The patterns it may do `action` on; None: every queue."""
        if self.may_everywhere(action):
            return None
        return sorted({g.pattern for g in self.grants if action in g.actions})


FULL = Access(everything=True)
