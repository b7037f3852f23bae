"""Two indexes of graphs gain a column.

- task_workflow_idx (workflow) → (workflow, state): retention keeps every step of a workflow that
  has a step not yet done or cancelled, and asks that of each old step it looks at in one probe.
- dependency_parent_idx (parent) → (parent, child): a settle of a task that others wait for asks
  whether one of them has a lower id than the tasks it settles (then it locks them first, in id
  order), in one probe.
"""

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
        migrations.RemoveIndex(model_name="dependency", name="dependency_parent_idx"),
        migrations.AddIndex(
            model_name="dependency",
            index=models.Index(fields=["parent", "child"], name="dependency_parent_idx"),
        ),
    ]
