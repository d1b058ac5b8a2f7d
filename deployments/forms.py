"""Browser forms. Validation rules are the same function the API uses (check_draft)."""

from __future__ import annotations

from django import forms
from django.conf import settings
from django.core.exceptions import ValidationError
from django.db.models import Q
from django.forms.utils import pretty_name
from django.utils.functional import cached_property

from catalog.choices import Task
from catalog.drafts import with_catalog_model
from catalog.models import CatalogModel
from catalog.sources import REVISION_MAX
from deployments.choices import Dtype, KvCacheDtype, Quantization, ServingProfile, backend_choices
from deployments.limits import LIMITS
from deployments.picker import Card
from deployments.picker import cards as picker_cards
from deployments.profiles import PROFILE_FIELDS, Preset, apply_profile
from deployments.validation import NAME_MAX, check_draft
from quotas.choices import Role
from quotas.models import GpuFlavor, PriorityTier, Tenant
from quotas.policy import allowed_flavor_ids
from quotas.services import flavors_with_quota
from runtime.backends import not_installed


class DeploymentForm(forms.Form):
    tenant = forms.ModelChoiceField(queryset=Tenant.objects.none(), help_text="The team that owns it.")
    name = forms.CharField(
        max_length=NAME_MAX, help_text="Lowercase letters, digits and '-'; becomes the RayService name."
    )
    # The picker's cards post this (the API's `catalog_model`): the row fills the source, the pinned
    # revision and the token Secret through catalog.drafts, the API's own code path.
    catalog_model = forms.ModelChoiceField(
        queryset=CatalogModel.objects.filter(active=True),
        to_field_name="name",
        required=False,
        label="Catalog model",
        help_text="Fills the source, its pinned revision and the token Secret.",
    )
    model_source = forms.CharField(
        max_length=500,
        required=False,  # a catalog model fills it; check_draft asks for it otherwise
        help_text="Hugging Face id (org/model), s3://bucket/path or pvc://claim/path.",
    )
    model_revision = forms.CharField(
        max_length=REVISION_MAX,
        required=False,
        label="Revision",
        help_text="Hugging Face commit id, tag or branch; empty: the default branch. A catalog model sets it.",
    )
    task = forms.ChoiceField(
        choices=[("", "The catalog model's (chat otherwise)"), *Task.choices],
        required=False,
        help_text="What it serves: chat, completion, embeddings (/v1/embeddings) or scores (/v1/score). "
        "A catalog model sets it.",
    )
    served_model_name = forms.CharField(
        max_length=200, required=False, help_text="The name clients pass as `model` (defaults to the name)."
    )
    hf_token_secret = forms.CharField(
        max_length=253,
        required=False,
        label="HF token secret",
        help_text="Secret in your namespace with key HF_TOKEN, for gated models.",
    )
    backend = forms.ChoiceField(choices=(), help_text="Where it runs.")
    flavor = forms.ModelChoiceField(
        queryset=GpuFlavor.objects.filter(active=True), widget=forms.RadioSelect, empty_label=None, label="Hardware"
    )
    # The profile comes before the fields it fills (parallelism, replicas, engine options), right
    # after what it is computed from: the model and the hardware.
    serving_profile = forms.ChoiceField(
        choices=ServingProfile.choices,
        required=False,
        label="Serving profile",
        help_text="Fills parallelism, replicas, target and engine options for the chosen hardware; every field "
        "stays yours to edit.",
    )
    # The profile the fields were last filled from (the script or "Apply profile" sets it): a
    # request naming another profile is shown filled first, so nothing runs with unseen values.
    profile_applied = forms.CharField(max_length=12, required=False, widget=forms.HiddenInput)
    tensor_parallel_size = forms.IntegerField(
        **LIMITS["tensor_parallel_size"].bounds(),
        initial=1,
        label="Tensor parallel",
        help_text="GPUs one model copy is split across inside a node.",
    )
    pipeline_parallel_size = forms.IntegerField(
        **LIMITS["pipeline_parallel_size"].bounds(),
        initial=1,
        label="Pipeline parallel",
        help_text="Stages across nodes (for models too big for one node).",
    )
    min_replicas = forms.IntegerField(**LIMITS["min_replicas"].bounds(), initial=1)
    max_replicas = forms.IntegerField(
        **LIMITS["max_replicas"].bounds(), initial=1, help_text="GPUs reserved = max replicas × TP × PP."
    )
    target_ongoing_requests = forms.IntegerField(
        **LIMITS["target_ongoing_requests"].bounds(),
        initial=16,
        help_text="Autoscaling target: in-flight requests per replica.",
    )
    max_model_len = forms.IntegerField(
        **LIMITS["max_model_len"].bounds(),
        required=False,
        label="Max model length",
        help_text="Context length; empty = the model's own. Sizes the KV cache.",
    )
    gpu_memory_utilization = forms.FloatField(
        **LIMITS["gpu_memory_utilization"].bounds(),
        initial=0.9,
        label="GPU memory utilization",
        help_text="Share of GPU memory vLLM may use (0.5–0.98).",
    )
    enable_chunked_prefill = forms.BooleanField(
        required=False, initial=True, help_text="Interleave long prompts with decoding."
    )
    max_num_batched_tokens = forms.IntegerField(
        **LIMITS["max_num_batched_tokens"].bounds(),
        required=False,
        label="Max batched tokens",
        help_text="Tokens per scheduler step; empty = vLLM default.",
    )
    quantization = forms.ChoiceField(choices=Quantization.choices, required=False)
    dtype = forms.ChoiceField(choices=Dtype.choices, initial=Dtype.AUTO)
    kv_cache_dtype = forms.ChoiceField(
        choices=KvCacheDtype.choices,
        initial=KvCacheDtype.AUTO,
        required=False,  # a page from before the field posts none: vLLM's default, "auto"
        label="KV cache dtype",
        help_text="What vLLM stores the KV cache in. FP8 holds about twice the tokens; quantizing the weights "
        "does not change it.",
    )
    parameter_count_b = forms.FloatField(
        **LIMITS["parameter_count_b"].bounds(),
        required=False,
        label="Parameters (billions)",
        help_text="Only for models not in the catalog, for the memory estimate.",
    )
    priority_tier = forms.ChoiceField(
        choices=(),
        required=False,
        label="Priority tier",
        help_text="Kueue admits higher tiers first, and one may preempt a lower tier in your team's queue. "
        "Your team's policy says which you may use.",
    )

    def __init__(self, *args, user, **kwargs):
        super().__init__(*args, **kwargs)
        self.user = user
        self.preset: Preset | None = None
        self.offer_tiers(PriorityTier.objects.all())  # narrowed to the tenant's once it is known
        tenants = Tenant.objects.filter(
            pk__in=[t.pk for t in Tenant.objects.visible_to(user) if t.has_role(user, Role.MEMBER)]
        )
        tenants = tenants.filter(archived_at__isnull=True)
        self.fields["tenant"].queryset = tenants
        if len(tenants) == 1:  # a member of one team has nothing to choose: no "---------" beside it
            self.fields["tenant"].empty_label = None
            if not self.initial.get("tenant"):
                self.initial["tenant"] = tenants[0].pk
                self.offer_flavors_of(tenants[0])
        self.fields["backend"].choices = [
            (b, f"{label} (not installed on the cluster)" if not_installed(b) else label)
            for b, label in backend_choices()
            if b in settings.RUNTIME_BACKENDS
        ]
        self.fields["backend"].initial = settings.RUNTIME_DEFAULT_BACKEND
        self.check = None

    def offer_tiers(self, tiers, keep: str = "") -> None:
        """The tier choices: none, then `tiers` (and `keep`, the current one); the check refuses a
        tier the tenant's policy does not allow (quotas.policy.tier_error)."""
        rows = {t.name: t for t in tiers}
        if keep and keep not in rows and (kept := PriorityTier.objects.filter(name=keep).first()):
            rows[keep] = kept
        choices = [(t.name, f"{t.display_name} (priority {t.value})") for t in rows.values()]
        self.fields["priority_tier"].choices = [("", "None (Kueue's default priority)"), *choices]

    def offer_flavors_of(self, tenant: Tenant, keep: int | None = None) -> None:
        """Offer only the flavors the tenant's policy allows (and `keep`, the current one, so an
        existing deployment's page still shows what it runs on); the check refuses the rest."""
        allowed = allowed_flavor_ids(tenant)
        if allowed is not None:
            self.fields["flavor"].queryset = GpuFlavor.objects.filter(Q(active=True, pk__in=allowed) | Q(pk=keep))
        self.offer_tiers(tenant.allowed_tiers.all(), keep=self.initial.get("priority_tier") or "")

    def check_context(self, data: dict) -> dict:
        """check_draft's keyword arguments for this form's draft."""
        return {"tenant": data.get("tenant")}

    def draft(self, data: dict) -> dict:
        """The cleaned values as the draft check_draft (and the services) take."""
        return dict(data, quantization=data.get("quantization") or "")

    def clean_kv_cache_dtype(self) -> str:
        return self.cleaned_data.get("kv_cache_dtype") or KvCacheDtype.AUTO.value

    # The fields a catalog model fills; the API's PATCH rule reads which of them a change sends.
    MODEL_FIELDS = ("model_source", "model_revision", "task")
    partial = False  # catalog.drafts' `partial`: a new request, or a change of some fields

    def sent(self, name: str, value) -> bool:
        """Whether the form sends `name` the way an API request sends a field: a new request sends
        what is filled in (an empty field is one left out)."""
        return value not in (None, "")

    def with_catalog(self, data: dict) -> dict:
        """`data` with the picked catalog model's source, revision and token filled in (or, with
        none picked, a new source's revision cleared), as the API's serializer does."""
        given = {k: v for k, v in data.items() if k not in self.MODEL_FIELDS or self.sent(k, v)}
        filled = {
            **{k: data.get(k) or "" for k in self.MODEL_FIELDS},
            **with_catalog_model(given, partial=self.partial),
        }
        # The task's empty choice: the catalog model's, else what it was (a change) or chat (a new request).
        return {**filled, "task": filled["task"] or self.unchanged_task()}

    def unchanged_task(self) -> str:
        return Task.CHAT.value

    def clean(self):
        # The draft's rules run even when a field was refused, on what did clean: the fit panel
        # lists every problem at once (a field refused by its own check keeps that one message).
        data = super().clean()
        refused = set(self.errors)
        try:
            data = self.cleaned_data = self.with_catalog(data)
        except ValueError as error:  # a catalog model and another source or revision: the API's 400
            field, message = error.args
            self.add_error(field, message)
            refused.add(field)
            data.pop("catalog_model", None)
        self.check = check_draft(self.draft(data), refused=refused, **self.check_context(data))
        for name, messages in self.check.errors.items():
            if name not in refused:
                self.add_error(name if name in self.fields else None, messages)
        return data

    def labelled_errors(self) -> list[tuple[str, str]]:
        """(label, message) for every error of the form and of the fit check, in the words the
        form shows ("Max replicas", not max_replicas), each once, in the order of the fields."""
        errors = [(f, e) for f, messages in self.errors.items() for e in messages]
        if self.check is not None:
            errors += [(f, e) for f, messages in self.check.errors.items() for e in messages]
        order = {name: i for i, name in enumerate(self.fields)}  # top to bottom; the request as a whole first
        found: list[tuple[str, str]] = []
        for name, message in sorted(errors, key=lambda item: order.get(item[0], -1)):
            if (self.label_of(name), message) not in found:
                found.append((self.label_of(name), message))
        return found

    def quota_tenant(self) -> Tenant | None:
        """The tenant whose quota the hardware is marked against: the one chosen so far."""
        try:
            return self.fields["tenant"].clean(self["tenant"].value())
        except ValidationError:
            return None

    @cached_property
    def flavors_without_quota(self) -> set[int]:
        """The offered flavors (ids) the tenant has no quota for (quotas.services.flavors_with_quota):
        marked "no quota" on the tiles. They stay selectable: the fit panel still sizes the model
        on them and says how quota is requested, while the request itself is refused."""
        tenant = self.quota_tenant()
        if tenant is None:
            return set()
        offered = {flavor.pk for flavor in self.fields["flavor"].queryset}
        return offered - flavors_with_quota(tenant)

    def for_panel(self) -> DeploymentForm:
        """The form whose check the fit panel shows as the page loads: this one once submitted;
        before that, when the model and the hardware are filled in (an edit, an applied profile),
        a copy bound to those values, so the panel shows their fit instead of asking for them."""
        if self.is_bound or not (self["model_source"].value() and self["flavor"].value()):
            return self
        data = {}
        for name in self.fields:
            value = self[name].value()
            if isinstance(value, bool):
                value = "on" if value else None
            if value is not None:
                data[name] = value
        panel = self.bound(data)
        panel.is_valid()
        return panel

    def bound(self, data: dict) -> DeploymentForm:
        return DeploymentForm(data, user=self.user)

    def picker_cards(self, *, text: str = "", task: str = "", size: str = "") -> list[Card]:
        """The picker's cards: the catalog models the chosen tenant's policy allows (every active one
        before a tenant is chosen), each on the flavors that tenant may use."""
        tenant = self.quota_tenant()
        flavors = GpuFlavor.objects.filter(active=True).order_by("name")
        allowed = allowed_flavor_ids(tenant) if tenant is not None else None
        if allowed is not None:
            flavors = flavors.filter(pk__in=allowed)
        utilization = self.fields["gpu_memory_utilization"].initial
        return picker_cards(tenant, flavors, text=text, task=task, size=size, gpu_memory_utilization=utilization)

    def label_of(self, name: str) -> str:
        return label_of(self, name)

    def wants_profile_applied(self) -> bool:
        """The user pressed "Apply profile", or chose a profile the fields were not filled from
        (no script ran): show the filled form instead of requesting anything."""
        chosen = self.data.get("serving_profile") or ""
        if chosen not in ServingProfile.values:
            return False  # refused with a field error by the normal validation
        return "apply_profile" in self.data or bool(chosen and self.data.get("profile_applied") != chosen)

    def profile_context(self) -> dict:
        """apply_profile's keyword arguments for this form (a change counts its own GPUs)."""
        return {"tenant": self.cleaned_data.get("tenant")}

    def with_profile(self) -> tuple[dict, Preset | None]:
        """The values as submitted with the chosen profile's values in the fields it fills, and the
        preset (None without a profile or without valid hardware)."""
        self.is_valid()  # the fields that clean make the draft; the rest keep what was typed
        values = {name: self.data.get(name) for name in self.fields if name in self.data}
        values["enable_chunked_prefill"] = bool(self.cleaned_data.get("enable_chunked_prefill"))
        draft = {**self.profile_base(), **self.cleaned_data}
        draft["serving_profile"] = self.cleaned_data.get("serving_profile") or ""
        if not draft["serving_profile"] or "flavor" not in self.cleaned_data:
            return values, None
        applied = apply_profile(draft, sent=(), **self.profile_context())
        for name in PROFILE_FIELDS:
            value = applied.data[name]
            values[name] = value if isinstance(value, bool) else ("" if value is None else str(value))
        values["profile_applied"] = draft["serving_profile"]
        return values, applied.preset

    def profile_base(self) -> dict:
        return {}

    def applied(self) -> DeploymentForm:
        """A fresh (unbound) form showing the values with the chosen profile applied."""
        values, preset = self.with_profile()
        form = self.fresh(values)
        form.preset = preset
        return form

    def fresh(self, values: dict) -> DeploymentForm:
        return DeploymentForm(user=self.user, initial=values)


def editing_spec(deployment) -> dict:
    """What the edit form starts from: the change waiting for approval, if one waits (an edit
    replaces it, so submitting the form untouched changes nothing), else the serving spec.
    The flavor as its row (None if it is gone)."""
    from deployments.models import SPEC_FIELDS

    pending = deployment.proposed_revision
    if pending is None:
        return {k: getattr(deployment, k) for k in SPEC_FIELDS}
    spec = {k: pending.spec.get(k) for k in SPEC_FIELDS}
    return spec | {"flavor": GpuFlavor.objects.filter(pk=spec["flavor"]).first()}


class DeploymentEditForm(DeploymentForm):
    """The spec of an existing deployment: what PATCH deployments/<id>/ takes. The tenant, the
    name and the backend are fixed at creation."""

    FIXED = ("tenant", "name", "backend")

    def __init__(self, *args, deployment, user, **kwargs):
        self.base = editing_spec(deployment)
        initial = {k: v for k, v in self.base.items() if k not in self.FIXED}
        initial["flavor"] = getattr(self.base["flavor"], "pk", None)
        initial["profile_applied"] = self.base["serving_profile"]
        initial.update(kwargs.pop("initial", None) or {})
        super().__init__(*args, user=user, initial=initial, **kwargs)
        self.deployment = deployment
        self.offer_flavors_of(deployment.tenant, keep=initial["flavor"])
        for name in self.FIXED:
            del self.fields[name]

    def check_context(self, data: dict) -> dict:
        return {"tenant": self.deployment.tenant, "credit_gpus": self.deployment.reserved_gpus}

    partial = True

    def sent(self, name: str, value) -> bool:
        """A change sends what differs from the spec it changes (the API's PATCH sends only what
        changes): a new source with the revision left as it was loads the new source's default
        branch, unless a catalog model is picked."""
        return name in self.data and (value or "") != (self.base.get(name) or "")

    def unchanged_task(self) -> str:
        return self.base["task"]

    def profile_context(self) -> dict:
        return self.check_context({})

    def profile_base(self) -> dict:
        return dict(self.base)

    def fresh(self, values: dict) -> DeploymentForm:
        return DeploymentEditForm(deployment=self.deployment, user=self.user, initial=values)

    def draft(self, data: dict) -> dict:
        return dict(super().draft(data), backend=self.deployment.backend)

    def quota_tenant(self) -> Tenant | None:
        return self.deployment.tenant

    def bound(self, data: dict) -> DeploymentForm:
        return DeploymentEditForm(data, deployment=self.deployment, user=self.user)


def label_of(form: forms.Form, name: str) -> str:
    """A field's label as the form shows it; "__all__" and unknown names read as "Request"."""
    field = form.fields.get(name)
    if field is None:
        return "Request"
    return str(field.label or pretty_name(name))


def form_error_text(form: forms.Form) -> str:
    """A form's errors as one sentence for a message: "Max replicas: Ensure this value is…"."""
    return "; ".join(f"{label_of(form, f)}: {' '.join(errors)}" for f, errors in form.errors.items())


class RevisionForm(forms.Form):
    """An action on one revision (approve, reject, withdraw, roll back): the number the person saw.
    Acting on a revision that is no longer the one named is refused (409 stale_revision), never
    applied to another."""

    revision = forms.IntegerField(min_value=1, max_value=2_147_483_647, widget=forms.HiddenInput)
    reason = forms.CharField(max_length=2000, required=False)


class ApprovalDecisionForm(RevisionForm):
    """The approvals page's forms: which deployment, which revision, which decision."""

    deployment = forms.IntegerField(min_value=1, max_value=2_147_483_647, widget=forms.HiddenInput)
    decision = forms.ChoiceField(choices=[("approve", "Approve"), ("reject", "Reject")], widget=forms.HiddenInput)


class RevisionDiffForm(forms.Form):
    """Two revisions of one deployment to compare (?from=a&to=b); anything else is a form error."""

    def __init__(self, data=None, *, numbers: list[int], **kwargs):
        super().__init__(data, **kwargs)
        choices = [(n, f"Revision {n}") for n in numbers]
        self.fields["from"] = forms.TypedChoiceField(choices=choices, coerce=int, label="From revision")
        self.fields["to"] = forms.TypedChoiceField(choices=choices, coerce=int, label="To revision")


class ScaleForm(forms.Form):
    min_replicas = forms.IntegerField(**LIMITS["min_replicas"].bounds())
    max_replicas = forms.IntegerField(**LIMITS["max_replicas"].bounds())


class TryForm(forms.Form):
    """One prompt for the Try-it box (the API's TrySerializer has the same bounds)."""

    prompt = forms.CharField(max_length=2000, strip=True)
    max_tokens = forms.IntegerField(min_value=1, max_value=512, initial=32, required=False, label="Max tokens")
    # A score deployment's documents, one per line (deployments.trying: the first DOCUMENTS_MAX).
    documents = forms.CharField(max_length=4000, required=False, strip=True)

    def clean_max_tokens(self):
        return self.cleaned_data.get("max_tokens") or 32
