"""Admin-test fixtures: dead tasks, users with chosen permissions, a clean cache per test."""

from __future__ import annotations

from collections.abc import Callable

import pytest
from django.contrib.auth.models import Permission, User
from django.core.cache import cache
from django.test import Client

from tests.admin.factories import make_dead


@pytest.fixture(autouse=True)
def _fresh_cache() -> None:
    cache.clear()  # the dashboard caches its top errors for a few seconds


@pytest.fixture
def dead() -> Callable[..., list[int]]:
    return make_dead


@pytest.fixture
def user_with() -> Callable[..., Client]:
    """user_with("view_task", staff=True) → a logged-in client holding exactly those permissions."""
    made = 0

    def login(*codenames: str, staff: bool = True) -> Client:
        nonlocal made
        made += 1
        user = User.objects.create_user(f"user{made}", password=None, is_staff=staff)
        user.user_permissions.set(
            Permission.objects.filter(content_type__app_label="broker", codename__in=codenames)
        )
        client = Client()
        client.force_login(user)
        return client

    return login
