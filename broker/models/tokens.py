"""Access tokens with grants (broker/tokens): a name, a hash of the secret, what it may do."""

from __future__ import annotations

from django.db import models


class AccessToken(models.Model):
    """A bearer token made by `createtoken` or in admin. Only a SHA-256 of its secret is kept:
    the secret is shown once. `prefix` (the secret's first characters, not secret) finds the row
    by index, and names the token in lists and logs."""

    name = models.CharField(max_length=100, unique=True)
    prefix = models.CharField(max_length=16, unique=True)
    secret_hash = models.CharField(max_length=64)
    # ["produce+consume:tenant-a.*", "read:*"]: broker.tokens.grants reads them.
    grants = models.JSONField(default=list)
    created_at = models.DateTimeField()
    expires_at = models.DateTimeField(null=True, blank=True)
    # Written at most once a minute per token and process (broker.tokens.auth).
    last_used_at = models.DateTimeField(null=True, blank=True)
    revoked_at = models.DateTimeField(null=True, blank=True)
    # Moves on every change an API process must see (grants, expiry, revocation, deletion is a
    # row fewer): broker.tokens.auth revalidates its cache by count and newest of these.
    changed_at = models.DateTimeField()
    # --sqs: an access key id for AWS Signature V4, its secret encrypted (broker.tokens.sqskeys).
    sqs_key_id = models.CharField(max_length=32, null=True, blank=True, unique=True)
    sqs_secret_encrypted = models.TextField(blank=True, default="")

    class Meta:
        ordering = ["name"]
        verbose_name = "access token"

    def __str__(self) -> str:
        return self.name


class TokenGeneration(models.Model):
    """One row whose `n` moves on every change of the access tokens (broker.tokens.auth.bump):
    each process compares it, once a second at most, with the one it read, and forgets what it
    cached when it moved. A counter, not a newest time: a change committed late with an earlier
    clock moves it too."""

    n = models.BigIntegerField(default=0)

    def __str__(self) -> str:
        return f"access tokens, generation {self.n}"
