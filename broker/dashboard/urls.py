"""Dashboard routes, under /dashboard/ (a page for people: session login, not bearer tokens)."""

from django.urls import path

from broker.dashboard import views

app_name = "dashboard"
urlpatterns = [
    path("", views.index, name="index"),
    path("data.json", views.data, name="data"),
    path("history.json", views.history, name="history"),
]
