"""startproject's URLconf, plus `path("queue/", include("broker.urls"))`, and error handlers of
the project's own that answer HTML (the broker's paths must answer JSON all the same)."""

from django.contrib import admin
from django.http import HttpRequest, HttpResponse, HttpResponseNotFound
from django.urls import include, path


def project_page(request: HttpRequest) -> HttpResponse:
    return HttpResponse("<h1>the project's own page</h1>")


def project_404(request: HttpRequest, exception: Exception | None = None) -> HttpResponse:
    return HttpResponseNotFound("<h1>the project's own 404 page</h1>")


def project_500(request: HttpRequest) -> HttpResponse:
    return HttpResponse("<h1>the project's own 500 page</h1>", status=500)


# startproject's admin app discovers every app's admin at start; the bundled project's own
# AdminConfig (queueproject/apps.py), which these tests run under, leaves it to a URLconf.
admin.autodiscover()

urlpatterns = [
    path("admin/", admin.site.urls),
    path("queue/", include("broker.urls")),
    path("", project_page),
]

handler404 = project_404
handler500 = project_500
