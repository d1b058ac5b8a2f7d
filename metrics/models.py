"""Engine metrics per deployment: derived samples, downsampled as they age, and the last raw
snapshot of each deployment's counters with the recent intervals of its rate window."""

from __future__ import annotations

from django.db import models


class Resolution(models.IntegerChoices):
    RAW = 15, "15 s"
    MINUTE = 60, "1 min"
    TEN_MINUTES = 600, "10 min"


class MetricSample(models.Model):
    """Derived metrics for one deployment over one interval; downsampled as it ages."""

    deployment = models.ForeignKey("deployments.ModelDeployment", on_delete=models.CASCADE, related_name="samples")
    ts = models.DateTimeField()
    resolution = models.PositiveSmallIntegerField(choices=Resolution.choices, default=Resolution.RAW)
    prompt_tokens_per_s = models.FloatField(null=True)
    generation_tokens_per_s = models.FloatField(null=True)
    requests_per_s = models.FloatField(null=True)
    errors_per_s = models.FloatField(null=True)
    kv_cache_pct = models.FloatField(null=True)
    running = models.FloatField(null=True)
    waiting = models.FloatField(null=True)
    ttft_p50 = models.FloatField(null=True)
    ttft_p95 = models.FloatField(null=True)
    itl_p50 = models.FloatField(null=True)
    itl_p95 = models.FloatField(null=True)
    e2e_p50 = models.FloatField(null=True)
    e2e_p95 = models.FloatField(null=True)
    preemptions_per_s = models.FloatField(null=True)
    # The seconds of the cycle this point stands for (None for a first point: gauges only): its
    # rates cover the rate window (runtime.exposition.window), but in sums (usage: rate ×
    # interval_s; rollups, which weight rates by it) each point counts for its own share.
    interval_s = models.FloatField(null=True)
    # Ratio parts as increments over the interval: ratios are divided at read time, so a rollup
    # (a sum of increments) gives the ratio of sums, never a mean of ratios.
    prefix_cache_hits = models.FloatField(null=True)
    prefix_cache_queries = models.FloatField(null=True)
    requests_finished = models.FloatField(null=True)
    requests_failed = models.FloatField(null=True)
    # Ray Serve's replicas of the model (healthy, and the autoscaler's target), where it reports them.
    replicas_running = models.FloatField(null=True)
    replicas_target = models.FloatField(null=True)
    # Each request's phases, p50/p95 over the requests finished in the rate window (vLLM's
    # request_queue_time / request_prefill_time / request_decode_time histograms).
    queue_p50 = models.FloatField(null=True)
    queue_p95 = models.FloatField(null=True)
    prefill_p50 = models.FloatField(null=True)
    prefill_p95 = models.FloatField(null=True)
    decode_p50 = models.FloatField(null=True)
    decode_p95 = models.FloatField(null=True)
    # Requests waiting, by why (vllm:num_requests_waiting_by_reason: capacity, deferred).
    waiting_capacity = models.FloatField(null=True)
    waiting_deferred = models.FloatField(null=True)
    # Requests refused at admission per second, by the queue limit hit (vllm:admission_rejections_total).
    rejected_queued_reqs_per_s = models.FloatField(null=True)
    rejected_queued_tokens_per_s = models.FloatField(null=True)
    # The highest sampled value of a gauge in a rollup's bucket (metrics.aggregate.PEAKS); None on raw rows.
    running_peak = models.FloatField(null=True)
    kv_cache_pct_peak = models.FloatField(null=True)

    class Meta:
        # The table and index keep the names they had in the deployments app (moved without a copy).
        db_table = "deployments_metricsample"
        ordering = ["ts"]
        indexes = [models.Index(fields=["deployment", "resolution", "ts"], name="deployments_deploym_9cc3ee_idx")]

    def __str__(self) -> str:
        return f"sample {self.deployment_id} @ {self.ts:%Y-%m-%d %H:%M:%S}"


class ScrapeState(models.Model):
    """The last raw snapshot of a deployment's counters, so the next scrape can compute rates, and
    the intervals since the snapshots before it that the rate window still reaches (`history`:
    runtime.exposition.derive.Interval.to_dict, oldest first; a few numbers per family, bounded
    by the window)."""

    deployment = models.OneToOneField(
        "deployments.ModelDeployment", on_delete=models.CASCADE, related_name="scrape_state"
    )
    snapshot = models.JSONField(default=dict)
    history = models.JSONField(default=list)
    last_success = models.DateTimeField(null=True)
    last_error = models.TextField(blank=True)
    last_attempt = models.DateTimeField(null=True)
    # The KV cache capacity each engine reported at its last successful read (vllm:cache_config_info,
    # runtime.exposition.cacheinfo): [{"engine": {label: value}, "tokens": N}, ...], one per engine
    # or replica; empty when none has reported (still starting, or an exporter that drops it).
    kv_cache = models.JSONField(default=list, blank=True)

    class Meta:
        db_table = "deployments_scrapestate"  # the deployments app's table, kept (see MetricSample)

    def __str__(self) -> str:
        return f"scrape state {self.deployment_id}"


class AdvisorObjectives(models.Model):
    """A deployment's own targets for the advisor (metrics.advisor.Objectives); defaults apply
    where a deployment has no row."""

    deployment = models.OneToOneField(
        "deployments.ModelDeployment", on_delete=models.CASCADE, related_name="advisor_objectives"
    )
    ttft_p95_objective_s = models.FloatField(default=2.0)
    waiting_floor = models.FloatField(default=2.0)
    kv_cache_floor_pct = models.FloatField(default=90.0)
    breach_share_pct = models.FloatField(default=10.0)
    updated_at = models.DateTimeField(auto_now=True)

    def __str__(self) -> str:
        return f"advisor objectives {self.deployment_id}"
