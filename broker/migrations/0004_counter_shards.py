"""Create the counter shards up front, so a transition's counter update never has to."""
from django.db import migrations

SHARDS = 16


def create_shards(apps, schema_editor):
    CounterShard = apps.get_model("broker", "CounterShard")
    CounterShard.objects.bulk_create(
        [CounterShard(shard=i) for i in range(SHARDS)], ignore_conflicts=True
    )


class Migration(migrations.Migration):
    dependencies = [("broker", "0003_processing_histogram")]
    operations = [migrations.RunPython(create_shards, migrations.RunPython.noop)]
