"""manage.py createtoken <name> --grant <actions>:<pattern> [...] [--expires 30d] [--sqs]."""

from __future__ import annotations

from typing import Any

from django.core.management.base import BaseCommand, CommandError, CommandParser
from django.db import IntegrityError
from django.utils import timezone

from broker.models import AccessToken
from broker.tokens import making
from broker.tokens.grants import GrantError


class Command(BaseCommand):
    help = (
        "Make an access token with grants (<actions>:<queue pattern>; actions produce, consume,"
        " read, manage joined by '+', or all). Its secret is printed once: only a hash is kept."
    )

    def add_arguments(self, parser: CommandParser) -> None:
        parser.add_argument("name", help="a name for people and for tasks' enqueued_by")
        parser.add_argument(
            "--grant", action="append", default=[], required=True,
            help="e.g. produce+consume:tenant-a.*, read:*, all:orders (repeat for more)",
        )  # fmt: skip
        parser.add_argument("--expires", help="refused after this long: 30d, 12h, 90m")
        parser.add_argument("--sqs", action="store_true", help="also an SQS access key")

    def handle(self, *args: Any, **options: Any) -> None:
        name = options["name"].strip()
        if not name or len(name) > 100:
            raise CommandError("The name is 1 to 100 characters.")
        if AccessToken.objects.filter(name=name).exists():
            raise CommandError(f"A token named {name!r} exists already.")
        expires_at = None
        if options["expires"]:
            try:
                expires_at = timezone.now() + making.duration(options["expires"])
            except ValueError as exc:
                raise CommandError(f"--expires: {exc}") from exc
        try:
            made = making.make(name, options["grant"], expires_at, sqs=options["sqs"])
        except GrantError as exc:
            raise CommandError(f"--grant {exc}") from exc
        except IntegrityError as exc:
            raise CommandError(f"A token named {name!r} exists already.") from exc
        # stdout: what a script keeps, the secret last (and alone without --sqs); stderr: words.
        err = self.stderr
        err.write(f"Token {name!r} made; its secret is shown this once (only a hash is kept).")
        err.write(f"Grants: {', '.join(made.token.grants)}")
        if expires_at:
            err.write(f"Expires: {expires_at.isoformat(timespec='seconds')}")
        if made.sqs_key_id:
            err.write("Its SQS access key, shown this once too, signs requests to /sqs.")
            self.stdout.write(f"AWS_ACCESS_KEY_ID={made.sqs_key_id}")
            self.stdout.write(f"AWS_SECRET_ACCESS_KEY={made.sqs_secret}")
        self.stdout.write(made.secret)
