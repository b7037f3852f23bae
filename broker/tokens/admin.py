"""Admin for access tokens: the list (name, prefix, grants, creation, expiry, last use, revoked),
add (the secret shown once, only its hash kept), edit grants and expiry, revoke."""

from __future__ import annotations

from datetime import datetime
from typing import Any

from django import forms
from django.contrib import admin, messages
from django.db.models import QuerySet
from django.http import HttpRequest
from django.utils import timezone
from django.utils.translation import ngettext

from broker.models import AccessToken
from broker.tokens import auth, making
from broker.tokens.grants import GrantError, parse_all


def _minute(at: datetime | None) -> str:
    return "—" if at is None else timezone.localtime(at).strftime("%Y-%m-%d %H:%M")


class AccessTokenForm(forms.ModelForm):
    """A token's name, grants (one a line) and expiry; on adding, whether it has an SQS key."""

    grants_text = forms.CharField(
        label="Grants",
        widget=forms.Textarea(attrs={"rows": 4, "cols": 60}),
        help_text="One a line: <actions>:<queue pattern>, actions produce, consume, read, "
        "manage joined by '+', or all; the pattern a glob (tenant-a.*, *).",
    )
    sqs = forms.BooleanField(
        label="SQS key", required=False, help_text="Also an SQS access key id and secret."
    )

    class Meta:
        model = AccessToken
        fields = ("name", "expires_at")

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        if not self.is_bound and self.instance.pk:
            self.initial["grants_text"] = "\n".join(self.instance.grants)
        if self.instance.pk:
            del self.fields["sqs"]

    def clean_grants_text(self) -> list[str]:
        lines = [line.strip() for line in self.cleaned_data["grants_text"].splitlines()]
        lines = [line for line in lines if line]
        try:
            return [str(g) for g in parse_all(lines)]
        except GrantError as exc:
            raise forms.ValidationError(str(exc)) from exc


@admin.register(AccessToken)
class AccessTokenAdmin(admin.ModelAdmin):
    form = AccessTokenForm
    list_display = (
        "name", "prefix", "grants_shown", "created_at", "expires_at", "last_used", "state",
    )  # fmt: skip
    search_fields = ("name", "prefix")
    readonly_fields = ("prefix", "created_at", "last_used", "revoked_at", "sqs_key_id")
    actions = ("revoke_selected",)

    @admin.display(description="grants")
    def grants_shown(self, token: AccessToken) -> str:
        return ", ".join(token.grants)

    @admin.display(description="last used", ordering="last_used_at")
    def last_used(self, token: AccessToken) -> str:
        return _minute(token.last_used_at)

    @admin.display(description="state")
    def state(self, token: AccessToken) -> str:
        if token.revoked_at is not None:
            return f"revoked {_minute(token.revoked_at)}"
        if token.expires_at is not None and token.expires_at <= timezone.now():
            return "expired"
        return "active"

    def get_fields(self, request: HttpRequest, obj: AccessToken | None = None) -> list[str]:
        if obj is None:
            return ["name", "grants_text", "expires_at", "sqs"]
        return ["name", "prefix", "grants_text", "expires_at", *self.readonly_fields[1:]]

    def save_model(self, request: HttpRequest, obj: AccessToken, form: Any, change: bool) -> None:
        grants = form.cleaned_data["grants_text"]
        if change:
            obj.grants = grants
            obj.changed_at = timezone.now()
            obj.save()
            auth.invalidate()
            return
        made = making.make(obj.name, grants, obj.expires_at, sqs=form.cleaned_data.get("sqs"))
        obj.pk, obj.prefix = made.token.pk, made.token.prefix
        obj._state.adding = False
        shown = f"Token {obj.name!r}: its secret, shown this once (only a hash is kept): " + (
            made.secret
        )
        if made.sqs_key_id:
            shown += f" — SQS access key id {made.sqs_key_id}, secret {made.sqs_secret}"
        self.message_user(request, shown, messages.WARNING)
        auth.invalidate()

    def delete_model(self, request: HttpRequest, obj: AccessToken) -> None:
        super().delete_model(request, obj)
        auth.invalidate()

    def delete_queryset(self, request: HttpRequest, queryset: QuerySet) -> None:
        super().delete_queryset(request, queryset)
        auth.invalidate()

    @admin.action(description="Revoke selected tokens", permissions=["change"])
    def revoke_selected(self, request: HttpRequest, queryset: QuerySet) -> None:
        revoked = making.revoke(queryset)
        self.message_user(
            request, ngettext("%d token revoked.", "%d tokens revoked.", revoked) % revoked
        )
