"""A token revoked through one process is refused by every broker process within a second, and
a token made elsewhere closes the API of a running broker (API.md "Access tokens with grants")."""

from __future__ import annotations

import time
from pathlib import Path

import pytest

from broker.models import AccessToken
from broker.tokens import making
from tests.procs import gunicorn, http, wait_until

pytestmark = [pytest.mark.e2e, pytest.mark.postgres, pytest.mark.timeout(120)]


def _stats(base: str, secret: str | None) -> int:
    headers = {"Authorization": f"Bearer {secret}"} if secret else {}
    return http("GET", f"{base}/stats", headers=headers)[0]


def test_revoked_elsewhere__refused_by_every_process_within_a_second(
    db_url: str, tmp_path: Path
) -> None:
    with gunicorn(db_url, tmp_path, "broker", WORKERS="2") as base:
        assert _stats(base, None) == 200  # open: no token anywhere
        secret = making.make("ops", ["read:*"]).secret  # made by this (other) process
        wait_until(lambda: _stats(base, None) == 401, 3, what="the API to close")
        # Every worker process has seen (and cached) the token: many requests, two workers.
        assert all(_stats(base, secret) == 200 for _ in range(20))
        making.revoke(AccessToken.objects.filter(name="ops"))
        revoked_at = time.monotonic()
        # Refused by whichever process answers, within a second of the revocation.
        wait_until(lambda: _stats(base, secret) == 401, 1.5, 0.02, "the revocation")
        refused_after = time.monotonic() - revoked_at
        assert refused_after < 1.5
        time.sleep(max(0.0, 1.05 - refused_after))
        assert [_stats(base, secret) for _ in range(20)] == [401] * 20
