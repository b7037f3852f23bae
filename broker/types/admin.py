"""Admin for job types: the ones of your own listed with their schemas, added, edited and deleted
through broker.types.catalog (the rules PUT and DELETE /types apply); the built-in ones shown
beside them, read-only."""

from __future__ import annotations

import json
from typing import Any

from django import forms
from django.contrib import admin
from django.db.models import QuerySet
from django.http import HttpRequest, HttpResponse

from broker.admin.display import EMPTY, when
from broker.models import JobType
from broker.types import catalog

SHORT_SCHEMA = 120  # characters of a schema shown in the list


def _shown(schema: Any) -> str:
    return json.dumps(schema, indent=2, ensure_ascii=False)


class JobTypeForm(forms.ModelForm):
    """A type, checked by the rules PUT /types/{name} applies."""

    schema = forms.CharField(
        required=False,
        widget=forms.Textarea(attrs={"rows": 14, "cols": 80, "class": "vLargeTextField"}),
        help_text="A JSON Schema (draft 2020-12) its payloads must match, as JSON; empty or "
        "null: any payload. References resolve only inside it.",
    )

    class Meta:
        model = JobType
        fields = ("name", "description", "schema")

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        stored = self.instance.schema
        if stored is not None and not self.is_bound:
            self.initial["schema"] = _shown(json.loads(stored))

    def clean(self) -> dict[str, Any]:
        data = super().clean()
        name = data.get("name") if self.instance._state.adding else self.instance.name
        if self.instance._state.adding and isinstance(name, str):
            for messages in catalog.name_problems(name).values():
                self.add_error("name", messages)
            if catalog.is_builtin(name):
                self.add_error("name", "A built-in job type has this name.")
        text = (data.get("schema") or "").strip()
        try:
            schema = json.loads(text) if text else None
        except ValueError:
            self.add_error("schema", "Not JSON.")
            return data
        self.body = {"schema": schema, "description": data.get("description") or ""}
        try:
            catalog.checked(self.body)
        except catalog.TypeProblems as exc:
            for field, messages in exc.fields.items():
                self.add_error(field if field in self.fields else None, messages)
        return data


@admin.register(JobType)
class JobTypeAdmin(admin.ModelAdmin):
    """Job types of your own; the built-in ones are listed below them, read-only."""

    form = JobTypeForm
    list_display = ("name", "description", "schema_summary", "updated")
    search_fields = ("name", "description")
    actions = ("delete_selected",)

    def get_readonly_fields(self, request: HttpRequest, obj: Any = None) -> tuple[str, ...]:
        return ("name",) if obj is not None else ()

    def save_model(self, request: HttpRequest, obj: JobType, form: Any, change: bool) -> None:
        row, _ = catalog.put(obj.name, form.body)
        obj.pk, obj.created_at, obj.updated_at = row.pk, row.created_at, row.updated_at

    def delete_model(self, request: HttpRequest, obj: JobType) -> None:
        catalog.delete_many([obj.name])

    def delete_queryset(self, request: HttpRequest, queryset: QuerySet) -> None:
        catalog.delete_many(list(queryset.values_list("name", flat=True)))

    def changelist_view(
        self, request: HttpRequest, extra_context: dict[str, Any] | None = None
    ) -> HttpResponse:
        builtins = [
            {**kind, "schema_shown": _shown(kind["schema"])} for kind in catalog.builtins().values()
        ]
        return super().changelist_view(request, {**(extra_context or {}), "builtins": builtins})

    @admin.display(description="schema")
    def schema_summary(self, obj: JobType) -> str:
        if obj.schema is None:
            return "(any payload)"
        compact = json.dumps(json.loads(obj.schema), ensure_ascii=False)
        return compact if len(compact) <= SHORT_SCHEMA else compact[: SHORT_SCHEMA - 1] + "…"

    @admin.display(description="updated", ordering="updated_at")
    def updated(self, obj: JobType) -> str:
        return when(obj.updated_at, timespec="seconds") if obj.updated_at else EMPTY
