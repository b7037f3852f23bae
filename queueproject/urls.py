"""Routes: the JSON API at the root, admin for people; JSON 404/500 everywhere else."""
from django.contrib import admin
from django.http import HttpRequest, JsonResponse
from django.urls import include, path


def not_found(request: HttpRequest, exception: Exception | None = None) -> JsonResponse:
    return JsonResponse({"error": "Not found."}, status=404)


def server_error(request: HttpRequest) -> JsonResponse:
    return JsonResponse({"error": "Internal error; it has been logged."}, status=500)


urlpatterns = [
    path("admin/", admin.site.urls),
    path("", include("broker.api.urls")),
]

handler404 = not_found
handler500 = server_error
