"""Routes: the JSON API at the root, admin for people; JSON 404/500 everywhere else."""
from django.contrib import admin
from django.http import HttpRequest, JsonResponse
from django.urls import include, path, re_path

from broker.api.schema import DocsView, SchemaView
from broker.metrics import MetricsView


def not_found(request: HttpRequest, exception: Exception | None = None) -> JsonResponse:
    return JsonResponse({"error": "Not found."}, status=404)


def server_error(request: HttpRequest) -> JsonResponse:
    return JsonResponse({"error": "Internal error; it has been logged."}, status=500)


# The API first, its hottest routes first: Django tries patterns in order on every request.
urlpatterns = [
    path("", include("broker.api.urls")),
    path("admin/", admin.site.urls),
    path("dashboard/", include("broker.dashboard.urls")),
    re_path(r"^api/schema/?$", SchemaView.as_view(), name="schema"),
    re_path(r"^api/docs/?$", DocsView.as_view(), name="docs"),
    path("metrics", MetricsView.as_view()),
]

handler404 = not_found
handler500 = server_error
