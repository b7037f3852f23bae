"""Making access tokens: the secret shown once and only its hash kept; SQS keys, whose secret
Signature V4 needs back, kept encrypted (Fernet, a key derived from SECRET_KEY)."""

from __future__ import annotations

import base64
import hashlib
import re
import secrets
from dataclasses import dataclass
from datetime import datetime, timedelta

from django.conf import settings
from django.db import IntegrityError, transaction
from django.utils import timezone

from broker.models import AccessToken
from broker.tokens.auth import digest
from broker.tokens.grants import parse_all

_DURATION = re.compile(r"(\d{1,9})([smhd])")
_UNITS = {"s": 1, "m": 60, "h": 3600, "d": 86400}


@dataclass(frozen=True)
class Made:
    """A new token and what is shown once: its secret, and its SQS key's id and secret."""

    token: AccessToken
    secret: str
    sqs_key_id: str | None = None
    sqs_secret: str | None = None


def duration(text: str) -> timedelta:
    """ "30d", "12h", "90m", "45s" → a timedelta; ValueError otherwise."""
    match = _DURATION.fullmatch(text.strip().lower().replace(" ", ""))
    if not match or int(match[1]) == 0:
        raise ValueError(f'a duration like "30d", "12h", "90m"; not {text!r}')
    return timedelta(seconds=int(match[1]) * _UNITS[match[2]])


def new_secret() -> tuple[str, str]:
    """(prefix, the whole token): bq_<8 hex>_<256 random bits, urlsafe base64>."""
    prefix = secrets.token_hex(4)
    return prefix, f"bq_{prefix}_{secrets.token_urlsafe(32)}"


def _fernet() -> object:
    from cryptography.fernet import Fernet

    key = hashlib.sha256(b"broker.tokens.sqs:" + settings.SECRET_KEY.encode()).digest()
    return Fernet(base64.urlsafe_b64encode(key))


def encrypt(secret: str) -> str:
    return _fernet().encrypt(secret.encode()).decode()  # type: ignore[attr-defined]


def decrypt(token: str) -> str | None:
    """The SQS secret kept as `token`; None when SECRET_KEY changed since (the key is lost)."""
    from cryptography.fernet import InvalidToken

    try:
        return _fernet().decrypt(token.encode()).decode()  # type: ignore[attr-defined]
    except (InvalidToken, ValueError):
        return None


def make(
    name: str, grants: list[str], expires_at: datetime | None = None, sqs: bool = False
) -> Made:
    """Store a new token (GrantError for a bad grant; IntegrityError for a name taken)."""
    parsed = parse_all(grants)
    for _ in range(5):
        prefix, secret = new_secret()
        now = timezone.now()
        row = AccessToken(
            name=name, prefix=prefix, secret_hash=digest(secret).hex(),
            grants=[str(g) for g in parsed], created_at=now, changed_at=now,
            expires_at=expires_at,
        )  # fmt: skip
        key_id = sqs_secret = None
        if sqs:
            key_id = "AKBQ" + secrets.token_hex(8).upper()
            sqs_secret = secrets.token_urlsafe(30)
            row.sqs_key_id, row.sqs_secret_encrypted = key_id, encrypt(sqs_secret)
        if AccessToken.objects.filter(prefix=prefix).exists():
            continue  # one in four billion: draw again
        with transaction.atomic():
            row.save(force_insert=True)
        return Made(row, secret, key_id, sqs_secret)
    raise IntegrityError("no free token prefix")


def revoke(rows: object) -> int:
    """Revoke the tokens of a queryset; every process refuses them within a second."""
    from broker.tokens import auth

    now = timezone.now()
    with transaction.atomic():
        revoked = int(
            rows.filter(revoked_at__isnull=True).update(revoked_at=now, changed_at=now)  # type: ignore[attr-defined]
        )
        auth.bump()
    return revoked
