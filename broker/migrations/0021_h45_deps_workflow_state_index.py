"""task_workflow_idx gains the state: retention keeps every step of a workflow that has a step
not yet done or cancelled, and asks that of each old step it looks at in one probe."""

from django.db import migrations, models


class Migration(migrations.Migration):
    dependencies = [("broker", "0020_keystate_of_requeued_tasks")]

    operations = [
        migrations.RemoveIndex(model_name="task", name="task_workflow_idx"),
        migrations.AddIndex(
            model_name="task",
            index=models.Index(
                condition=models.Q(("workflow__isnull", False)),
                fields=["workflow", "state"],
                name="task_workflow_idx",
            ),
        ),
    ]
