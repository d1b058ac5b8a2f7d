"""MetricSample and ScrapeState move from the deployments app to metrics: state only, the
tables and the index stay as they are."""

import django.db.models.deletion
from django.db import migrations, models


class Migration(migrations.Migration):
    initial = True

    dependencies = [
        ("deployments", "0001_initial"),
    ]

    operations = [
        migrations.SeparateDatabaseAndState(
            state_operations=[
                migrations.CreateModel(
                    name="MetricSample",
                    fields=[
                        ("id", models.BigAutoField(auto_created=True, primary_key=True, serialize=False, verbose_name="ID")),
                        ("ts", models.DateTimeField()),
                        (
                            "resolution",
                            models.PositiveSmallIntegerField(
                                choices=[(15, "15 s"), (60, "1 min"), (600, "10 min")], default=15
                            ),
                        ),
                        ("prompt_tokens_per_s", models.FloatField(null=True)),
                        ("generation_tokens_per_s", models.FloatField(null=True)),
                        ("requests_per_s", models.FloatField(null=True)),
                        ("errors_per_s", models.FloatField(null=True)),
                        ("kv_cache_pct", models.FloatField(null=True)),
                        ("running", models.FloatField(null=True)),
                        ("waiting", models.FloatField(null=True)),
                        ("ttft_p50", models.FloatField(null=True)),
                        ("ttft_p95", models.FloatField(null=True)),
                        ("itl_p50", models.FloatField(null=True)),
                        ("itl_p95", models.FloatField(null=True)),
                        ("e2e_p50", models.FloatField(null=True)),
                        ("e2e_p95", models.FloatField(null=True)),
                        ("prefix_cache_hit_pct", models.FloatField(null=True)),
                        ("preemptions_per_s", models.FloatField(null=True)),
                        (
                            "deployment",
                            models.ForeignKey(
                                on_delete=django.db.models.deletion.CASCADE,
                                related_name="samples",
                                to="deployments.modeldeployment",
                            ),
                        ),
                    ],
                    options={
                        "db_table": "deployments_metricsample",
                        "ordering": ["ts"],
                        "indexes": [
                            models.Index(fields=["deployment", "resolution", "ts"], name="deployments_deploym_9cc3ee_idx")
                        ],
                    },
                ),
                migrations.CreateModel(
                    name="ScrapeState",
                    fields=[
                        ("id", models.BigAutoField(auto_created=True, primary_key=True, serialize=False, verbose_name="ID")),
                        ("snapshot", models.JSONField(default=dict)),
                        ("last_success", models.DateTimeField(null=True)),
                        ("last_error", models.TextField(blank=True)),
                        ("last_attempt", models.DateTimeField(null=True)),
                        (
                            "deployment",
                            models.OneToOneField(
                                on_delete=django.db.models.deletion.CASCADE,
                                related_name="scrape_state",
                                to="deployments.modeldeployment",
                            ),
                        ),
                    ],
                    options={
                        "db_table": "deployments_scrapestate",
                    },
                ),
            ],
            database_operations=[],
        ),
    ]
