"""Who is asking: the bearer token of a request → its Access, or None (a 401).

Database tokens are kept in a per-process cache, so a token seen before costs no query: the
cache is revalidated at most every REFRESH_S by one query: the count of tokens and the
generation counter (TokenGeneration), which every change of a token moves (`bump`: a new token,
new grants or expiry, a revocation, a deletion). A revoked token is thus refused by every process
within REFRESH_S; an expiry needs no query at all. Last use is written at most once a
LAST_USED_EVERY_S per token and process.
"""

from __future__ import annotations

import hashlib
import hmac
import logging
import re
import threading
import time
from dataclasses import dataclass
from datetime import datetime
from typing import Any

from django.db import DatabaseError, IntegrityError, connection, transaction
from django.db.models import F
from django.utils import timezone

from broker.tokens.grants import FULL, Access, Grant, GrantError, parse_all
from contract.conf import broker_settings

log = logging.getLogger(__name__)

REFRESH_S = 1.0
LAST_USED_EVERY_S = 60.0
# Unknown prefixes remembered (as "no such token") at most: past it the cache starts over.
MAX_ENTRIES = 10_000
# bq_<8 hex: the prefix, kept in clear>_<43 characters of urlsafe base64: 256 random bits>
TOKEN_RE = re.compile(r"bq_([0-9a-f]{8})_[A-Za-z0-9_-]{43}")


def digest(secret: str) -> bytes:
    """The SHA-256 of a token's whole text: what is stored (as hex) and compared."""
    return hashlib.sha256(secret.encode("utf-8", "surrogatepass")).digest()


@dataclass(slots=True)
class _Entry:
    token_id: int
    secret_hash: bytes
    access: Access | None  # None: its grants no longer parse (refused)
    expires_at: datetime | None
    revoked: bool
    used_written: float = float("-inf")  # time.monotonic() of the last last_used_at write
    sqs_secret: str | None = None  # an SQS key's secret, decrypted once


class _Cache:
    def __init__(self) -> None:
        self.lock = threading.Lock()
        self.checked = float("-inf")
        self.generation: tuple[int, int] | None = None  # (tokens, generation)
        self.entries: dict[str, _Entry | None] = {}

    @property
    def any_tokens(self) -> bool:
        return bool(self.generation and self.generation[0])

    def refresh(self) -> None:
        """Revalidate when older than REFRESH_S: one query. While the database cannot be reached
        what was known stays (a parked claim waits out a failover, as without tokens); never
        known, the database's error goes up (a 503)."""
        now = time.monotonic()
        if now - self.checked < REFRESH_S:
            return
        from broker.models import AccessToken, TokenGeneration
        from broker.wakeup import hub

        if hub.away and self.generation is not None:
            return  # a query would wait for a connection the pool cannot make
        try:
            with connection.cursor() as cursor:
                cursor.execute(
                    f"SELECT (SELECT count(*) FROM {AccessToken._meta.db_table}),"  # noqa: S608
                    f" (SELECT n FROM {TokenGeneration._meta.db_table} WHERE id = 1)"
                )
                tokens, n = cursor.fetchone()
        except DatabaseError:
            if self.generation is None or connection.in_atomic_block:
                raise
            log.warning("access tokens not revalidated: the database cannot be reached")
            self.checked = now
            return
        generation = (int(tokens), int(n or 0))
        with self.lock:
            if generation != self.generation:
                self.entries = {}
                self.generation = generation
            self.checked = now

    def entry(self, prefix: str) -> _Entry | None:
        if prefix in self.entries:
            return self.entries[prefix]
        from broker.models import AccessToken

        row = AccessToken.objects.filter(prefix=prefix).first()
        found = None if row is None else entry_of(row)
        self.remember(prefix, found)
        return found

    def remember(self, slot: str, found: _Entry | None) -> None:
        with self.lock:
            if len(self.entries) >= MAX_ENTRIES:
                self.entries = {}
            self.entries[slot] = found


def entry_of(row: Any) -> _Entry:
    """A token row as the cache keeps it."""
    try:
        access: Access | None = Access.of_token(row.pk, row.name, parse_all(row.grants))
    except (GrantError, TypeError):
        access = None
    return _Entry(
        row.pk, bytes.fromhex(row.secret_hash), access, row.expires_at, row.revoked_at is not None
    )


_cache = _Cache()


def cache() -> _Cache:
    return _cache


def invalidate() -> None:
    """Forget what this process knows (a token changed here: seen at once, not within 1 s)."""
    with _cache.lock:
        _cache.checked = float("-inf")
        _cache.entries = {}


def assume_no_tokens() -> None:
    """Tests: each starts with an empty database, hence no token, known fresh."""
    with _cache.lock:
        _cache.generation, _cache.entries, _cache.checked = (0, 0), {}, time.monotonic()


def bump() -> None:
    """A token changed: move the generation (every process revalidates within REFRESH_S) and
    forget this process's cache at once. Call in the change's transaction, after it."""
    from broker.models import TokenGeneration

    moved = TokenGeneration.objects.filter(pk=1).update(n=F("n") + 1)
    if not moved:
        try:
            with transaction.atomic():
                TokenGeneration.objects.create(pk=1, n=1)
        except IntegrityError:  # made meanwhile by another change
            TokenGeneration.objects.filter(pk=1).update(n=F("n") + 1)
    invalidate()


def closed() -> bool:
    """Whether the API needs a token: BROKER_API_TOKENS is set or a database token exists
    (revoked and expired ones included)."""
    if broker_settings.BROKER_API_TOKENS:
        return True
    _cache.refresh()
    return _cache.any_tokens


def bearer(header: str) -> str | None:
    scheme, _, given = header.partition(" ")
    given = given.strip()
    if scheme.lower() != "bearer" or not given:
        return None
    return given


def _env_token_ok(given: str, tokens: list[str]) -> bool:
    # Digests, so every comparison is of 32 bytes and time says nothing of a token's length
    # either; every token is compared, without stopping at a match.
    given_digest = digest(given)
    ok = False
    for token in tokens:
        ok |= hmac.compare_digest(given_digest, digest(token))
    return ok


def database_access(given: str) -> Access | None:
    """The Access of a database token's text, or None (unknown, wrong, revoked, expired)."""
    match = TOKEN_RE.fullmatch(given)
    if match is None:
        return None
    _cache.refresh()
    entry = _cache.entry(match.group(1))
    # Compared even for an unknown prefix, so time does not tell which prefixes exist.
    expected = entry.secret_hash if entry is not None else b"\0" * 32
    if not hmac.compare_digest(digest(given), expected) or entry is None:
        return None
    if entry.revoked or entry.access is None:
        return None
    if entry.expires_at is not None and entry.expires_at <= timezone.now():
        return None
    note_use(entry)
    return entry.access


def note_use(entry: _Entry) -> None:
    now = time.monotonic()
    if now - entry.used_written < LAST_USED_EVERY_S:
        return
    entry.used_written = now
    from broker.models import AccessToken

    # Not changed_at: a use is no change the other processes must revalidate for. A use is
    # not worth a failed request: unwritten while the database is away.
    try:
        AccessToken.objects.filter(pk=entry.token_id).update(last_used_at=timezone.now())
    except DatabaseError:
        if connection.in_atomic_block:
            raise
        log.warning(
            "last use of token %s not written: the database cannot be reached", entry.token_id
        )


def authenticate(header: str) -> Access | None:
    """The Access of a request's Authorization header; None when it must be refused (401)."""
    given = bearer(header)
    env = broker_settings.BROKER_API_TOKENS
    if given is not None:
        if env and _env_token_ok(given, env):
            return FULL
        found = database_access(given)
        if found is not None:
            return found
    return None if closed() else FULL


def grants_text(grants: tuple[Grant, ...]) -> str:
    return ", ".join(str(g) for g in grants)
