"""The `queue-broker` command of an installed broker: the bundled project's manage.py, plus
`queue-broker serve` (gunicorn with the project's configuration, the parking worker included)."""

from __future__ import annotations

import os
import sys

SERVE_HELP = """usage: queue-broker serve [gunicorn options]

Serve the broker's web app with gunicorn and the project's configuration (the parking worker,
threads, keep-alive) on BROKER_BIND (default 127.0.0.1:8080). Options are gunicorn's and
override the configuration's (-b 0.0.0.0:8080, --workers 4). Run `queue-broker runsweeper`
beside it, and `queue-broker migrate` once before the first start.
"""


def main(argv: list[str] | None = None) -> None:
    """Run `queue-broker <command> [options]`: `serve`, or any management command."""
    args = list(sys.argv[1:] if argv is None else argv)
    os.environ.setdefault("DJANGO_SETTINGS_MODULE", "queueproject.settings")
    if args[:1] == ["serve"]:
        serve(args[1:])
        return
    from django.core.management import execute_from_command_line

    if not args or args[0] in {"help", "-h", "--help"}:
        print("Type 'queue-broker serve --help' for the web server.\n")  # noqa: T201
    execute_from_command_line(["queue-broker", *args])


def serve(args: list[str]) -> None:
    """gunicorn, configured by queueproject.gunicorn_conf; returns when gunicorn stops."""
    if args[:1] in (["-h"], ["--help"]):
        print(SERVE_HELP, end="")  # noqa: T201
        return
    from gunicorn.app.wsgiapp import run

    sys.argv = ["queue-broker serve", "-c", "python:queueproject.gunicorn_conf", *args]
    run()
