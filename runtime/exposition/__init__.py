"""vLLM metrics: scrape or query, parse with prometheus_client, derive rates and quantiles.

- `snapshot`: the families read and :class:`~snapshot.Snapshot`, one deployment's series at one instant;
- `parse`: filtering an exposition and parsing it with prometheus_client;
- `derive`: what happened between two snapshots (:class:`~derive.Interval`) and the rates,
  ratios and quantiles over a run of them (:class:`~derive.MetricPoint`);
- `window`: the rate window both paths read over, and the direct path's step over it;
- `sources`: the HTTP scrape (one endpoint, or many at once);
- `promql`: the whole fleet's points from Prometheus, a fixed set of PromQL queries per cycle.

Two exposition dialects carry the same numbers:

* vLLM's own ``/metrics`` (``vllm:<name>``, labels ``model_name``, ``engine``);
* Ray's metrics port under Ray Serve LLM (``ray_vllm_<name>``, one series per replica with
  extra labels ``ReplicaId``, ``WorkerId``, ``SessionName`` …, beside hundreds of unrelated
  ``ray_*`` series).

Both are normalised to ``<name>`` and kept per series (one series = one label set, ``le``
aside). Totals are sums over series; rates are computed per series and *then* summed, the
way Prometheus does ``sum(rate(...))``. Summing first and differencing afterwards would turn
a replica that goes away (scale-down, restart) into a fake counter reset and a rate spike.

Counters absent from a snapshot count as zero: vLLM registers them all at start, and Ray
only exports a counter after its first increment (``ray_vllm_prefix_cache_hits_total`` is
missing from a Ray exposition until the first cache hit), so absence means "never counted".

No Django here: the scrape cycle (metrics.collect) stores :class:`MetricPoint` values and keeps the previous
:class:`Snapshot` (``to_dict``/``from_dict``) to difference against, with the intervals of the
rate window before it.
"""
