from django.apps import AppConfig


class ReclaimConfig(AppConfig):
    """Idle GPUs come back by policy: idle warnings and stops, and serving schedules.
    Sits above metrics (it reads generated tokens) and deployments (it stops and starts them)."""

    name = "reclaim"
    verbose_name = "Idle policy"
