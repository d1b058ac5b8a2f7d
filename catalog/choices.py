from django.db import models

from runtime.tasks import TASKS

# What a catalog model (and a deployment) is served for: runtime.tasks holds the list, its labels
# and what each means to the engine; this is its Django choices.
Task = models.TextChoices("Task", [(name.upper(), (name, facts.label)) for name, facts in TASKS.items()])


class TokenSource(models.TextChoices):
    """Where a gated model's Hugging Face token comes from."""

    TENANT = "tenant", "The tenant's Hugging Face token"
    SECRET = "secret", "A named Secret in the tenant namespace"
