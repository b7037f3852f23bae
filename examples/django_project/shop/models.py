from django.db import models


class Order(models.Model):
    item = models.CharField(max_length=100)
    state = models.CharField(max_length=20, default="new")  # new, then shipped by a worker
    created_at = models.DateTimeField(auto_now_add=True)

    def __str__(self) -> str:
        return f"order {self.pk}: {self.item} ({self.state})"
