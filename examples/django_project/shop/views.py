from django.db import transaction
from django.http import HttpRequest, JsonResponse
from django.views.decorators.csrf import csrf_exempt
from django.views.decorators.http import require_POST

import broker
from shop.models import Order


# An endpoint for scripts (curl) in this example; a page's form would carry its CSRF token.
@csrf_exempt
@require_POST
def place_order(request: HttpRequest) -> JsonResponse:
    """POST /orders/ (item=...): the order and its shipping task, in one transaction: both
    exist once it commits, neither if it rolls back."""
    item = request.POST.get("item") or "a book"
    try:
        with transaction.atomic():
            order = Order.objects.create(item=item)
            task_id = broker.enqueue({"order": order.pk}, type="ship_order", queue="shipping")
    except broker.InvalidTaskError as exc:  # e.g. ship_order not registered: no worker ran yet
        return JsonResponse({"error": str(exc), "fields": exc.fields}, status=400)
    return JsonResponse({"order": order.pk, "task": task_id}, status=201)
