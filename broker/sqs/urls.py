"""The SQS endpoint's routes: POST /sqs, and POSTs to queue URLs (/sqs/<queue name>)."""

from django.urls import path

from broker.sqs.protocol import endpoint

urlpatterns = [
    path("sqs", endpoint),
    path("sqs/", endpoint),
    path("sqs/<str:queue_name>", endpoint),
]
