"""GET /types, and GET, PUT, DELETE /types/{name} (API.md "Job types of your own")."""

from __future__ import annotations

from rest_framework.request import Request
from rest_framework.response import Response

from broker.api import parsing
from broker.api.base import BrokerView
from broker.api.errors import ValidationFailed
from broker.types import catalog


class TypesView(BrokerView):
    """GET /types: every job type, the built-in ones included, by name."""

    http_method_names = ("get", "head", "options")
    grants = {"get": "read:*"}

    def get(self, request: Request) -> Response:
        return Response({"results": catalog.listing()})


class TypeView(BrokerView):
    """GET /types/{name}; PUT creates or replaces a type of your own; DELETE deletes one."""

    http_method_names = ("get", "head", "put", "delete", "options")
    grants = {"get": "read:*", "put": "manage:*", "delete": "manage:*"}

    def get(self, request: Request, name: str) -> Response:
        return Response(catalog.get(name))

    def put(self, request: Request, name: str) -> Response:
        body = parsing.read_object(request)
        try:
            row, created = catalog.put(name, body)
        except catalog.TypeProblems as exc:
            raise ValidationFailed(exc.fields) from exc
        if not created:
            return Response(catalog.describe(row))
        return Response(catalog.describe(row), status=201, headers={"Location": request.path})

    def delete(self, request: Request, name: str) -> Response:
        parsing.no_body(request)
        catalog.delete(name)
        return Response(status=204)
