"""The API's routes, without trailing slashes as API.md writes them."""

from django.urls import path

from broker.api import batch, operate, views
from broker.events import views as events
from broker.history.views import HistoryView
from broker.types import views as types
from broker.workflows import views as workflows

urlpatterns = [
    path("jobs/next", views.ClaimView.as_view()),
    path("jobs/<str:task_id>/ack", views.AckView.as_view()),
    path("jobs", views.JobsView.as_view()),
    path("jobs/claim", batch.ClaimBatchView.as_view()),
    path("jobs/ack", batch.AckBatchView.as_view()),
    path("jobs/batch", batch.EnqueueBatchView.as_view()),
    path("jobs/nack", batch.NackBatchView.as_view()),
    path("jobs/<str:task_id>/nack", views.NackView.as_view()),
    path("jobs/<str:task_id>/extend", views.ExtendView.as_view()),
    path("jobs/<str:task_id>/progress", views.ProgressView.as_view()),
    path("jobs/<str:task_id>/wait", events.WaitView.as_view()),
    path("jobs/<str:task_id>", views.TaskView.as_view()),
    path("stats", views.StatsView.as_view()),
    path("stats/history", HistoryView.as_view()),
    path("dlq", views.DeadLetterView.as_view()),
    path("dlq/<str:task_id>/requeue", views.RequeueView.as_view()),
    path("healthz", views.HealthView.as_view()),
    path("queues", operate.QueuesView.as_view()),
    path("queues/<str:name>", operate.QueueView.as_view()),
    path("schedules", operate.SchedulesView.as_view()),
    path("schedules/<str:name>", operate.ScheduleView.as_view()),
    path("workflows", workflows.WorkflowsView.as_view()),
    path("workflows/<str:workflow_id>", workflows.WorkflowView.as_view()),
    path("types", types.TypesView.as_view()),
    path("types/<str:name>", types.TypeView.as_view()),
    path("events", events.EventsView.as_view()),
]
