"""Routes: the JSON API at the root, admin for people; JSON 404/500 everywhere else."""

from django.contrib import admin
from django.http import HttpRequest, HttpResponse, JsonResponse
from django.template.loader import render_to_string
from django.urls import include, path, re_path
from django.utils.cache import patch_vary_headers
from django.views.decorators.http import require_safe

# Every error JSON, on the pages for people too (API.md: no request gets an HTML page): a Host
# not allowed (400), a permission refused (403), a form post without its CSRF token (403).
from broker.api.errors import bad_request, csrf_failure, forbidden, not_found, server_error
from broker.api.schema import DocsView, SchemaView
from broker.metrics import MetricsView

__all__ = ["bad_request", "csrf_failure", "forbidden", "not_found", "server_error", "urlpatterns"]

# (key in the JSON answer, path, title, what is there): the same for people and for scripts.
INDEX_LINKS = (
    ("dashboard", "/dashboard/", "Dashboard", "Tasks per state and queue, rates, top errors."),
    ("admin", "/admin/", "Admin", "Every task, the dead-letter queue: requeue, discard, cancel."),
    ("api_docs", "/api/docs/", "API docs", "The HTTP API in Swagger UI; try calls from there."),
    ("api_schema", "/api/schema/", "API schema", "OpenAPI 3 (YAML; ?format=json for JSON)."),
    ("metrics", "/metrics", "Metrics", "Prometheus text format."),
    ("health", "/healthz", "Health", "200 while the database answers."),
)


@require_safe
def index(request: HttpRequest) -> HttpResponse:
    """GET /: where to go, as HTML for a browser and JSON for a script; reads no database, so it
    is open even when BROKER_API_TOKENS is set."""
    if request.get_preferred_type(["application/json", "text/html"]) == "text/html":
        links = [{"href": href, "title": title, "about": about} for _, href, title, about in
                 INDEX_LINKS]  # fmt: skip
        response = HttpResponse(render_to_string("index.html", {"links": links}))
    else:
        response = JsonResponse(
            {"name": "queue broker", "links": {key: href for key, href, _, _ in INDEX_LINKS}}
        )
    patch_vary_headers(response, ["Accept"])
    return response


# What a browser asks every site for: without it, each first page load logged a 404.
_ICON = (
    b'<svg xmlns="http://www.w3.org/2000/svg" viewBox="0 0 16 16">'
    b'<rect width="16" height="16" rx="3" fill="#417690"/>'
    b'<path d="M4 5h8M4 8h8M4 11h5" stroke="#fff" stroke-width="1.6"/></svg>'
)


@require_safe
def favicon(request: HttpRequest) -> HttpResponse:
    response = HttpResponse(_ICON, content_type="image/svg+xml")
    response["Cache-Control"] = "public, max-age=86400"
    return response


# Every app's ModelAdmins, before admin.site.urls lists their pages (queueproject/apps.py).
admin.autodiscover()

# The API first, its hottest routes first: Django tries patterns in order on every request.
urlpatterns = [
    path("", include("broker.api.urls")),
    path("", include("broker.sqs.urls")),
    path("admin/", admin.site.urls),
    path("dashboard/", include("broker.dashboard.urls")),
    re_path(r"^api/schema/?$", SchemaView.as_view(), name="schema"),
    re_path(r"^api/docs/?$", DocsView.as_view(), name="docs"),
    path("metrics", MetricsView.as_view()),
    path("", index, name="index"),
    path("favicon.ico", favicon),
]

handler400 = bad_request
handler403 = forbidden
handler404 = not_found
handler500 = server_error
