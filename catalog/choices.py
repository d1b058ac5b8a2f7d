from django.db import models


class Task(models.TextChoices):
    """What a catalog model is served for (vLLM's runner: generation or pooling)."""

    CHAT = "chat", "Chat"
    COMPLETION = "completion", "Completion"
    EMBEDDING = "embedding", "Embedding"
    SCORE = "score", "Rerank / score"


class TokenSource(models.TextChoices):
    """Where a gated model's Hugging Face token comes from."""

    TENANT = "tenant", "The tenant's Hugging Face token"
    SECRET = "secret", "A named Secret in the tenant namespace"
