from django.apps import AppConfig


class ReclaimConfig(AppConfig):
    """Idle GPUs come back by policy: idle warnings and stops, and serving schedules.
    Sits above metrics (it reads generated tokens) and deployments (it stops and starts them)."""

    name = "reclaim"
    verbose_name = "Idle policy"

    def ready(self) -> None:
        # The idle advice (metrics, below this app) says what the tenant's idle policy will do.
        from metrics.advice import register_idle_note
        from reclaim.idle import idle_note

        register_idle_note("idle-policy", idle_note)
