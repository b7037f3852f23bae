"""The broker inside a Django project of yours: `path("queue/", include("broker.urls"))`.

Under that prefix: the whole JSON API (`/queue/jobs`, `/queue/jobs/next`, ..., `/queue/types`),
the SQS endpoint (`/queue/sqs`), `/queue/metrics` and the dashboard (`/queue/dashboard/`, for
staff logged in to your admin, where the broker's pages are). Each API view is guarded as the
bundled project's middleware guards it (broker/api/guard.py): bearer tokens, the body limit,
JSON errors; and any other path under the prefix is a JSON 404, whatever your project's
handler404 is. The bundled project (queueproject/urls.py) routes the same views at its root.
"""

from django.urls import include, path, re_path
from django.views.generic import RedirectView

from broker.api import urls as api_urls
from broker.api.errors import not_found
from broker.api.guard import guard_all, guarded
from broker.metrics import MetricsView
from broker.sqs import urls as sqs_urls

urlpatterns = [
    *guard_all(api_urls.urlpatterns, open_routes=frozenset({"healthz"})),
    *guard_all(sqs_urls.urlpatterns, sqs=True),
    path("metrics", guarded(MetricsView.as_view())),
    path("dashboard/", include("broker.dashboard.urls")),
    path("dashboard", RedirectView.as_view(url="dashboard/")),
    # Last: every other path under the prefix (a project's own 404 page is for its own paths).
    re_path(r"", guarded(not_found)),
]
