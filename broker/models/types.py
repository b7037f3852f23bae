"""Job types of your own: a name and its payload's JSON Schema (broker/types)."""

from __future__ import annotations

from django.db import models


class JobType(models.Model):
    """A job type registered with PUT /types/{name} or in admin. The built-in types are not
    rows: their rules live in contract/jobtypes, and no row may take one of their names."""

    name = models.CharField(max_length=64, unique=True)
    # JSON text, NULL for a null schema (any payload): as the payload's column, not jsonb, which
    # cannot hold U+0000 (a schema's "const" may).
    schema = models.TextField(null=True, blank=True)
    description = models.TextField(blank=True, default="")
    created_at = models.DateTimeField()
    # Moves forward on every change, by a microsecond at least: with the row's id it keys the
    # compiled schemas each broker process keeps (broker.types.checks).
    updated_at = models.DateTimeField()

    class Meta:
        ordering = ["name"]
        verbose_name = "job type"

    def __str__(self) -> str:
        return self.name
