from __future__ import annotations

import re

from django import forms
from django.utils.html import format_html, format_html_join

from catalog.models import CatalogModel
from catalog.patterns import PATTERN_MAX, PATTERNS_MAX, clean_patterns
from quotas.choices import Role
from quotas.models import REQUESTS_PER_MINUTE_HELP, TOKENS_PER_MINUTE_HELP, WAKE_TIMEOUT_HELP, GpuFlavor, PriorityTier
from quotas.services import QUOTA_VALUES
from quotas.validators import validate_node_labels
from runtime.accelerators import CPU_ONLY, OFFERED


class QuotaRequestForm(forms.Form):
    flavor = forms.ModelChoiceField(queryset=GpuFlavor.objects.filter(active=True))
    nominal_gpus = forms.IntegerField(
        min_value=0, max_value=100_000, label="Nominal GPUs", help_text="Guaranteed GPUs for this flavor."
    )
    borrowing_limit_gpus = forms.IntegerField(
        min_value=0,
        max_value=100_000,
        initial=0,
        label="Borrowing limit",
        help_text="Extra GPUs you may borrow from the cohort when idle (can be reclaimed by preemption).",
    )
    lending_limit_gpus = forms.IntegerField(
        min_value=0,
        max_value=100_000,
        required=False,
        label="Lending limit",
        help_text="Most of your unused quota others may borrow (empty: all).",
    )
    justification = forms.CharField(
        max_length=2000, widget=forms.Textarea(attrs={"rows": 3}), help_text="What will run on it, and why now."
    )
    ends_at = forms.DateTimeField(
        required=False,
        label="Until (optional)",
        widget=forms.DateTimeInput(attrs={"type": "datetime-local"}, format="%Y-%m-%dT%H:%M"),
        help_text="For a temporary change: the quota returns to its current values then (the portal's time zone; "
        "at most a year ahead).",
    )


class DecisionForm(forms.Form):
    comment = forms.CharField(
        max_length=2000, required=False, widget=forms.Textarea(attrs={"rows": 2}), label="Comment (required to reject)"
    )


# --- platform administration (portal/platform_views.py) -----------------------------------------

REASON_HELP = "Why: kept in the audit log."


def _reason(required: bool = False) -> forms.CharField:
    return forms.CharField(max_length=2000, required=required, label="Reason", help_text=REASON_HELP)


class TenantForm(forms.Form):
    slug = forms.CharField(
        max_length=40,
        help_text="The tenant's Kubernetes namespace and queue name: lowercase letters, digits and '-'. "
        "Fixed once the tenant exists.",
    )
    display_name = forms.CharField(max_length=100, label="Display name")
    cohort = forms.CharField(
        max_length=63, required=False, help_text="Kueue cohort to lend and borrow in (empty: the platform default)."
    )
    reason = _reason()

    def __init__(self, *args, slug_locked: bool = False, **kwargs):
        super().__init__(*args, **kwargs)
        if slug_locked:
            self.fields["slug"].disabled = True
            self.fields["slug"].help_text = "Fixed: it names the tenant's namespace, queues, API keys and endpoints."


class PolicyForm(forms.Form):
    auto_approve_max_gpus = forms.IntegerField(
        min_value=0,
        max_value=100_000,
        label="Auto-approve up to (GPUs)",
        help_text="Requests within nominal quota needing at most this many GPUs are approved without a "
        "platform admin (0: every request waits for one).",
    )
    max_gpus_per_deployment = forms.IntegerField(
        min_value=0,
        max_value=100_000,
        label="Max GPUs per deployment",
        help_text="Max replicas × tensor parallel × pipeline parallel (0: no limit).",
    )
    allowed_flavors = forms.ModelMultipleChoiceField(
        queryset=GpuFlavor.objects.filter(active=True),
        required=False,
        widget=forms.CheckboxSelectMultiple,
        label="Allowed GPU flavors",
        help_text="None ticked: every active flavor.",
    )
    allowed_models = forms.ModelMultipleChoiceField(
        queryset=CatalogModel.objects.filter(active=True),
        required=False,
        widget=forms.CheckboxSelectMultiple,
        label="Allowed catalog models",
        help_text="Each at its pinned revision. None ticked and no patterns: any model.",
    )
    allowed_source_patterns = forms.CharField(
        required=False,
        max_length=PATTERNS_MAX * (PATTERN_MAX + 1),
        widget=forms.Textarea(attrs={"rows": 3}),
        label="Allowed model sources",
        help_text="One pattern per line; * matches anything, '/' included: meta-llama/*, s3://team-bucket/*.",
    )
    allowed_tiers = forms.ModelMultipleChoiceField(
        queryset=PriorityTier.objects.all(),
        required=False,
        widget=forms.CheckboxSelectMultiple,
        label="Allowed priority tiers",
        help_text="None ticked: its deployments have no tier (Kueue's default priority).",
    )
    auto_approve_tiers = forms.ModelMultipleChoiceField(
        queryset=PriorityTier.objects.all(),
        required=False,
        widget=forms.CheckboxSelectMultiple,
        label="Auto-approved priority tiers",
        help_text="Allowed tiers the policy approves within its ceiling; a request with another tier waits for "
        "a platform admin.",
    )
    monthly_budget = forms.DecimalField(
        max_digits=12,
        decimal_places=2,
        min_value=0,
        required=False,
        label="Monthly budget",
        help_text="Spend per calendar month in the currency of the GPU-hour prices (empty: no budget).",
    )
    budget_hard_stop = forms.BooleanField(
        required=False,
        label="Hard stop at 100 % of the budget",
        help_text="Stop the tenant's deployments and refuse new starts until the budget allows again.",
    )
    idle_warn_hours = forms.IntegerField(
        required=False,
        min_value=0,
        max_value=24 * 90,
        initial=0,
        label="Idle warning after (hours)",
        help_text="0: no warning.",
    )
    idle_stop_hours = forms.IntegerField(
        required=False,
        min_value=0,
        max_value=24 * 90,
        initial=0,
        label="Idle stop after (hours)",
        help_text="Stop a deployment without generated tokens for this long and release its GPUs (0: never).",
    )
    serving_schedule = forms.CharField(
        max_length=200,
        required=False,
        label="Serving schedule",
        help_text="When deployments may run, e.g. mon-fri 08:00-20:00 (empty: always).",
    )
    wake_timeout_seconds = forms.IntegerField(
        required=False,
        min_value=0,
        max_value=900,
        initial=120,
        label="Wake on request: wait up to (seconds)",
        help_text=WAKE_TIMEOUT_HELP,
    )
    tokens_per_minute = forms.IntegerField(
        required=False,
        min_value=0,
        max_value=10**9,
        initial=0,
        label="Tokens per minute",
        help_text=TOKENS_PER_MINUTE_HELP,
    )
    requests_per_minute = forms.IntegerField(
        required=False,
        min_value=0,
        max_value=10**7,
        initial=0,
        label="Requests per minute",
        help_text=REQUESTS_PER_MINUTE_HELP,
    )
    reason = _reason()

    def clean_allowed_source_patterns(self) -> list[str]:
        """Lines → patterns, with the rule the API uses (catalog.patterns)."""
        patterns, problem = clean_patterns(self.cleaned_data["allowed_source_patterns"])
        if problem:
            raise forms.ValidationError(problem)
        return patterns


class QuotaSetForm(forms.Form):
    """A platform admin's quota for one flavor. Unbound, it shows `flavor` with its current values
    (`current`: quotas.presenters.current_quota_values); bound, a value the request leaves out keeps
    its current one (:meth:`values`, quotas.services.quota_set), so it is never reset unseen."""

    flavor = forms.ModelChoiceField(queryset=GpuFlavor.objects.filter(active=True), label="GPU flavor")
    nominal_gpus = forms.IntegerField(min_value=0, max_value=100_000, label="Nominal GPUs")
    borrowing_limit_gpus = forms.IntegerField(min_value=0, max_value=100_000, initial=0, label="Borrowing limit")
    lending_limit_gpus = forms.IntegerField(
        min_value=0, max_value=100_000, required=False, label="Lending limit", help_text="Empty: all unused quota."
    )
    reason = _reason()

    def __init__(self, *args, current: dict | None = None, flavor: GpuFlavor | None = None, **kwargs):
        super().__init__(*args, **kwargs)
        if not self.is_bound and flavor is not None:
            self.initial = {"flavor": flavor.pk, **(current or {}).get(str(flavor.pk), {})}
        self.omitted = {name for name in QUOTA_VALUES if self.is_bound and self.add_prefix(name) not in self.data}
        for name in self.omitted:
            self.fields[name].required = False

    def values(self) -> dict:
        """The cleaned values for quota_set, without those the request left out."""
        return {name: value for name, value in self.cleaned_data.items() if name not in self.omitted}


class MemberAddForm(forms.Form):
    user = forms.CharField(max_length=254, label="Username or e-mail")
    role = forms.ChoiceField(choices=Role.choices, initial=Role.MEMBER)
    reason = _reason()


class MemberRoleForm(forms.Form):
    role = forms.ChoiceField(choices=Role.choices)


class ArchiveForm(forms.Form):
    confirm = forms.CharField(max_length=40, label="Type the tenant's slug to confirm")
    reason = _reason(required=True)


CAPACITY_CHOICES = [
    ("on-demand", "On-demand"),
    ("spot,on-demand", "Spot, falling back to on-demand"),
    ("spot", "Spot only"),
]


def labels_to_text(labels: dict) -> str:
    return "\n".join(f"{key}={value}" for key, value in sorted(labels.items()))


def tolerations_to_text(tolerations: list) -> str:
    lines = []
    for item in tolerations:
        head = item.get("key", "") + (f"={item['value']}" if item.get("value") else "")
        lines.append(f"{head}:{item['effect']}" if item.get("effect") else head or ":")
    return "\n".join(lines)


class SuggestingInput(forms.TextInput):
    """A text input that offers `options` in a <datalist>: still free text, the save decides."""

    def __init__(self, options: tuple[str, ...], attrs: dict | None = None):
        super().__init__(attrs)
        self.options = options

    def render(self, name, value, attrs=None, renderer=None):
        list_id = f"{(attrs or {}).get('id') or name}_options"
        html = super().render(name, value, {**(attrs or {}), "list": list_id}, renderer)
        options = format_html_join("", '<option value="{}">', ((option,) for option in self.options))
        return format_html('{}<datalist id="{}">{}</datalist>', html, list_id, options)


class FlavorForm(forms.Form):
    """A GPU flavor. Labels and tolerations are typed one per line, the way kubectl writes them."""

    name = forms.CharField(max_length=63, help_text="The Kueue ResourceFlavor's name; fixed once created.")
    gpu_model = forms.CharField(max_length=60, label="GPU model", help_text="e.g. H100 SXM5, L4")
    accelerator_type = forms.CharField(
        max_length=40,
        label="Accelerator type",
        widget=SuggestingInput(OFFERED),
        help_text=f"Ray's name, as Ray spells it (case counts): H100, A100, L4… {CPU_ONLY}: no accelerator "
        "(the local backend's CPU engine).",
    )
    gpu_memory_gib = forms.IntegerField(min_value=1, max_value=4096, label="GPU memory (GiB)")
    gpus_per_node = forms.IntegerField(min_value=1, max_value=64, label="GPUs per node")
    cpu_per_gpu = forms.IntegerField(min_value=1, max_value=256, initial=8, label="CPU cores per GPU")
    memory_gib_per_gpu = forms.IntegerField(min_value=1, max_value=4096, initial=64, label="Memory per GPU (GiB)")
    node_labels = forms.CharField(
        required=False,
        widget=forms.Textarea(attrs={"rows": 2}),
        label="Node labels",
        help_text="key=value, one per line (at most 7): labels this flavor's nodes carry besides "
        "llm-portal.io/flavor=<flavor name>, which the portal adds to the ResourceFlavor and its node pool and "
        "pins every pod by. Nodes the portal does not provision must carry that label too "
        "(kubectl label node NODE llm-portal.io/flavor=<flavor name>).",
    )
    tolerations = forms.CharField(
        required=False,
        widget=forms.Textarea(attrs={"rows": 2}),
        help_text="One per line: key=value:Effect (Equal), key:Effect (Exists), or key alone; Effect is "
        "NoSchedule, PreferNoSchedule or NoExecute.",
    )
    price_per_gpu_hour = forms.DecimalField(
        min_value=0, max_digits=8, decimal_places=2, required=False, label="Price per GPU-hour"
    )
    active = forms.BooleanField(required=False, initial=True, help_text="Offered for new requests and quotas.")
    # --- Karpenter node pool and Kueue topology (quotas.provisioning says what is allowed) ---
    provision = forms.BooleanField(
        required=False,
        label="Provision nodes with Karpenter",
        help_text="The portal keeps a Karpenter NodePool for this flavor, limited to the GPUs granted on it. "
        "Clearing it deletes the pool, and Karpenter removes its nodes. Not with topology levels: Kueue "
        "places those deployments only on nodes that already exist.",
    )
    capacity_types = forms.ChoiceField(
        required=False,
        choices=CAPACITY_CHOICES,
        initial="on-demand",
        label="Capacity",
        help_text="Spot nodes are cheaper and can be reclaimed.",
    )
    instance_types = forms.CharField(
        required=False,
        max_length=2000,
        widget=forms.Textarea(attrs={"rows": 2}),
        label="Instance types",
        help_text="One per line or comma-separated (none: any instance with this flavor's GPUs per node).",
    )
    consolidate_after = forms.CharField(
        required=False,
        max_length=20,
        initial="5m",
        label="Remove empty nodes after",
        help_text='e.g. 30s, 5m, 1h, or "Never".',
    )
    expire_after = forms.CharField(
        required=False,
        max_length=20,
        initial="720h",
        label="Replace nodes after",
        help_text='A node\'s lifetime, e.g. 720h, or "Never".',
    )
    node_class = forms.CharField(
        required=False,
        max_length=253,
        label="Node class",
        help_text="Off AWS: the node class this pool names (empty: KARPENTER_NODE_CLASS_NAME).",
    )
    topology_levels = forms.CharField(
        required=False,
        max_length=5000,
        widget=forms.Textarea(attrs={"rows": 3}),
        label="Topology levels",
        help_text="Node label keys, one per line, widest first, kubernetes.io/hostname last "
        "(e.g. a block label, a rack label, kubernetes.io/hostname). A replica spanning nodes is placed inside "
        "one domain of the first level. Once set, the levels can change but not be removed.",
    )
    reason = _reason()

    PROVISIONING_FIELDS = ("capacity_types", "instance_types", "consolidate_after", "expire_after", "node_class")
    FIELD_OF = {"provisioning": "provision"}  # the service's refusals of `provisioning` show on the box

    def clean_topology_levels(self) -> list:
        return [line.strip() for line in self.cleaned_data["topology_levels"].splitlines() if line.strip()]

    def clean(self) -> dict:
        """One `provisioning` value from the pool fields ({} unless provisioned); the flavor
        service validates it (quotas.provisioning)."""
        data = super().clean()
        values = {field: data.pop(field, None) for field in self.PROVISIONING_FIELDS}
        if data.pop("provision", False):
            values["capacity_types"] = (values["capacity_types"] or "on-demand").split(",")
            values["instance_types"] = [t for t in re.split(r"[\s,]+", values["instance_types"] or "") if t]
            data["provisioning"] = {k: v for k, v in values.items() if v not in (None, "")}
        else:
            data["provisioning"] = {}
        return data

    def clean_node_labels(self) -> dict:
        """key=value lines → {key: value}; the same checks as the API (validate_node_labels)."""
        labels: dict[str, str] = {}
        for number, line in enumerate(self.cleaned_data["node_labels"].splitlines(), start=1):
            if not line.strip():
                continue
            key, sep, value = line.strip().partition("=")
            if not sep or not key.strip():
                raise forms.ValidationError(f"Line {number}: write key=value.")
            if key.strip() in labels:
                raise forms.ValidationError(f"Line {number}: {key.strip()!r} is given twice; a node has one value.")
            labels[key.strip()] = value.strip()
        validate_node_labels(labels)
        return labels

    def clean_tolerations(self) -> list:
        tolerations = []
        for line in self.cleaned_data["tolerations"].splitlines():
            if not line.strip():
                continue
            head, sep, effect = line.strip().rpartition(":") if ":" in line else (line.strip(), "", "")
            key, eq, value = head.partition("=")
            item = {"key": key.strip(), "operator": "Equal" if eq else "Exists"}
            if eq:
                item["value"] = value.strip()
            if sep:
                item["effect"] = effect.strip()
            tolerations.append(item)
        return tolerations

    @classmethod
    def initial_for(cls, flavor: GpuFlavor) -> dict:
        initial = {name: getattr(flavor, name) for name in cls.base_fields if hasattr(flavor, name)}
        initial["node_labels"] = labels_to_text(flavor.node_labels or {})
        initial["tolerations"] = tolerations_to_text(flavor.tolerations or [])
        provisioning = flavor.provisioning or {}
        initial["provision"] = bool(provisioning)
        for field in cls.PROVISIONING_FIELDS:
            if field in provisioning:
                initial[field] = provisioning[field]
        if provisioning:
            initial["capacity_types"] = ",".join(provisioning.get("capacity_types") or ["on-demand"])
            initial["instance_types"] = "\n".join(provisioning.get("instance_types") or [])
        initial["topology_levels"] = "\n".join(flavor.topology_levels or [])
        return initial
