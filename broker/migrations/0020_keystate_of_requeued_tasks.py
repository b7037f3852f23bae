"""KeyState rows for the keys of unfinished tasks that lack one: a requeue out of the DLQ did
not upsert its key's row, which the sweeper may have pruned while the key had only dead tasks,
and a fair queue's claims never serve a key without a row (broker.queue.keys.requeued does now).
"""

from datetime import timedelta

from django.db import migrations
from django.db.models import Exists, OuterRef
from django.utils import timezone

UNFINISHED = ("ready", "handed_out", "delayed", "blocked")


def restore(apps, schema_editor):
    Task = apps.get_model("broker", "Task")
    KeyState = apps.get_model("broker", "KeyState")
    row = KeyState.objects.filter(queue=OuterRef("queue"), key=OuterRef("key"))
    missing = (
        Task.objects.filter(key__isnull=False, state__in=UNFINISHED)
        .exclude(Exists(row))
        .order_by()
        .values_list("queue", "key")
        .distinct()
    )
    never_served = timezone.now() - timedelta(days=1000 * 365)  # keys.unserved
    KeyState.objects.bulk_create(
        [KeyState(queue=queue, key=key, served_at=never_served) for queue, key in missing],
        batch_size=1000,
        ignore_conflicts=True,
    )


class Migration(migrations.Migration):
    dependencies = [("broker", "0019_sqs_message_extras")]

    operations = [migrations.RunPython(restore, migrations.RunPython.noop)]
