"""The model catalog: the models platform admins offer, each with its source, pinned revision,
task, licence, gating and the architecture facts sizing reads."""

from __future__ import annotations

from dataclasses import fields as dataclass_fields

from django.conf import settings
from django.core.exceptions import ValidationError
from django.core.validators import MaxValueValidator, MinValueValidator, RegexValidator
from django.db import models
from django.db.models import Q

from catalog.choices import Task, TokenSource
from catalog.sources import REVISION_MAX, revision_error, source_error, source_kind
from runtime.manifests.syntax import dns1123_subdomain_problem
from runtime.modelfacts import ModelFacts

NAME_MAX = 63
validate_catalog_name = RegexValidator(
    r"^[a-z0-9]([-a-z0-9]*[a-z0-9])?\Z",
    "Lowercase letters, digits and '-', starting and ending with a letter or digit.",
)
# The columns that hold runtime.modelfacts.ModelFacts, one per field, same names.
FACT_FIELDS = tuple(f.name for f in dataclass_fields(ModelFacts))
_COUNT = [MinValueValidator(1), MaxValueValidator(10**7)]  # layers, heads, dims: positive and bounded


class CatalogModelQuerySet(models.QuerySet):
    def visible_to(self, user, *, platform_admin: bool):
        """What `user` sees: active rows; every row for a platform admin (the caller says which
        it is: the rule lives in quotas, above this app)."""
        if not getattr(user, "is_authenticated", False):
            return self.none()
        return self if platform_admin else self.filter(active=True)

    def search(self, text: str):
        text = (text or "").strip()
        if not text:
            return self
        return self.filter(Q(name__icontains=text) | Q(display_name__icontains=text) | Q(source__icontains=text))


class CatalogModel(models.Model):
    """A model the platform offers: where its weights are, which revision, what it is for, and
    its architecture facts (imported from its config files or typed in). Tenant policies allow
    rows by name (quotas.policy); a deployment request may name one (`catalog_model`) to take its
    source, revision and token from it. Rows are deactivated, never deleted while a policy names them."""

    name = models.CharField(
        max_length=NAME_MAX,
        unique=True,
        validators=[validate_catalog_name],
        help_text="Short name used in the API and policies (lowercase letters, digits and '-').",
    )
    display_name = models.CharField(max_length=100)
    source = models.CharField(
        max_length=500,
        help_text="Hugging Face id (org/model), s3://bucket/path, pvc://claim/path, or a path under the local "
        "model root (local backend).",
    )
    revision = models.CharField(
        max_length=REVISION_MAX,
        blank=True,
        help_text="For a Hugging Face model: a 40-hex commit id (best) or a tag or branch name.",
    )
    follow_default_branch = models.BooleanField(
        default=False,
        help_text="Hugging Face models only: no pinned revision; each start loads what the default branch holds then.",
    )
    task = models.CharField(max_length=12, choices=Task.choices, default=Task.CHAT)
    licence = models.CharField(max_length=100, blank=True, help_text="e.g. apache-2.0, llama3.1.")
    gated = models.BooleanField(default=False, help_text="The hub asks for a token (an accepted licence).")
    token_source = models.CharField(
        max_length=8,
        choices=TokenSource.choices,
        default=TokenSource.TENANT,
        help_text="For a gated model: the tenant's token (set on the tenant's credentials page) or a named Secret.",
    )
    token_secret = models.CharField(
        max_length=253, blank=True, help_text="The Secret (key HF_TOKEN) in the tenant namespace, for a named Secret."
    )
    # --- architecture facts (runtime.modelfacts.ModelFacts; empty where unknown) ---------------
    architecture = models.CharField(max_length=100, blank=True)  # "" where the files do not say
    model_type = models.CharField(max_length=60, blank=True)
    parameters = models.BigIntegerField(null=True, blank=True, validators=[MinValueValidator(1)])
    weight_bytes = models.BigIntegerField(null=True, blank=True, validators=[MinValueValidator(1)])
    dtype = models.CharField(max_length=20, blank=True)
    layers = models.PositiveIntegerField(null=True, blank=True, validators=_COUNT)
    hidden_size = models.PositiveIntegerField(null=True, blank=True, validators=_COUNT)
    attention_heads = models.PositiveIntegerField(null=True, blank=True, validators=_COUNT)
    kv_heads = models.PositiveIntegerField(null=True, blank=True, validators=_COUNT)
    head_dim = models.PositiveIntegerField(null=True, blank=True, validators=_COUNT)
    max_context = models.PositiveIntegerField(null=True, blank=True, validators=[MinValueValidator(1)])
    vocab_size = models.PositiveIntegerField(null=True, blank=True, validators=[MinValueValidator(1)])
    kv_elements_per_token = models.BigIntegerField(null=True, blank=True, validators=[MinValueValidator(1)])
    facts_imported_at = models.DateTimeField(null=True, blank=True, help_text="When the facts were last imported.")
    # --- bookkeeping ---------------------------------------------------------------------------
    notes = models.TextField(blank=True, max_length=5000)
    active = models.BooleanField(default=True, help_text="Offered for new requests and policies.")
    created_by = models.ForeignKey(
        settings.AUTH_USER_MODEL, null=True, blank=True, on_delete=models.SET_NULL, related_name="+"
    )
    updated_by = models.ForeignKey(
        settings.AUTH_USER_MODEL, null=True, blank=True, on_delete=models.SET_NULL, related_name="+"
    )
    created = models.DateTimeField(auto_now_add=True)
    updated = models.DateTimeField(auto_now=True)

    objects = CatalogModelQuerySet.as_manager()

    class Meta:
        ordering = ["name"]
        indexes = [models.Index(fields=["task", "active"]), models.Index(fields=["source"])]

    def __str__(self) -> str:
        return f"{self.display_name} ({self.name})"

    @property
    def kind(self) -> str:
        """ "hf", "s3", "pvc" or "local"."""
        return source_kind(self.source)

    @property
    def parameters_b(self) -> float | None:
        return None if self.parameters is None else self.parameters / 1e9

    def facts(self) -> ModelFacts:
        return ModelFacts(**{name: getattr(self, name) if getattr(self, name) != "" else None for name in FACT_FIELDS})

    def clean(self) -> None:
        """The rules across fields: the source's syntax, the revision (pinned for the hub unless
        the default branch is followed on purpose), and the gating token."""
        errors: dict[str, str] = {}
        if self.name == "new":  # /platform/catalog/new/ is the page that creates one
            errors["name"] = "“new” is reserved: choose another name."
        if problem := source_error(self.source or "", local_paths=True):
            errors["source"] = problem
        hub = source_kind(self.source or "") == "hf"
        if problem := revision_error(self.revision or ""):
            errors["revision"] = problem
        elif not hub and (self.revision or self.follow_default_branch) and "source" not in errors:
            errors["revision"] = "Only Hugging Face models have revisions: leave it empty for this source."
        elif hub and self.revision and self.follow_default_branch:
            errors["follow_default_branch"] = "Either pin a revision or follow the default branch, not both."
        elif hub and not self.revision and not self.follow_default_branch and "source" not in errors:
            errors["revision"] = (
                "Pin a revision (a commit id, or a tag or branch name), or tick “follow the default branch”."
            )
        if self.gated and not hub and "source" not in errors:
            errors["gated"] = "Only Hugging Face models are gated (s3:// and pvc:// use the tenant's storage)."
        if self.gated and self.token_source == TokenSource.SECRET:
            if not self.token_secret:
                errors["token_secret"] = "Name the Secret that holds the token."
            elif problem := dns1123_subdomain_problem(self.token_secret):
                errors["token_secret"] = f"Not a valid Kubernetes Secret name. {problem}"
        elif self.token_secret:
            errors["token_secret"] = "Only a gated model with “a named Secret” names one."
        if errors:
            raise ValidationError(errors)
