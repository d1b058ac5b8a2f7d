"""AuditEvent moves from the portal app to core: state only, the table stays as it is."""

import django.db.models.deletion
from django.conf import settings
from django.db import migrations, models


class Migration(migrations.Migration):
    initial = True

    dependencies = [
        ("portal", "0002_audit_actor_name"),
        ("quotas", "0001_initial"),
        migrations.swappable_dependency(settings.AUTH_USER_MODEL),
    ]

    operations = [
        migrations.SeparateDatabaseAndState(
            state_operations=[
                migrations.CreateModel(
                    name="AuditEvent",
                    fields=[
                        ("id", models.BigAutoField(auto_created=True, primary_key=True, serialize=False, verbose_name="ID")),
                        ("created", models.DateTimeField(auto_now_add=True, db_index=True)),
                        ("actor_name", models.CharField(blank=True, max_length=150)),
                        ("action", models.CharField(db_index=True, max_length=64)),
                        ("object_type", models.CharField(max_length=64)),
                        ("object_id", models.CharField(max_length=64)),
                        ("reason", models.TextField(blank=True)),
                        ("changes", models.JSONField(blank=True, default=dict)),
                        (
                            "actor",
                            models.ForeignKey(
                                blank=True,
                                null=True,
                                on_delete=django.db.models.deletion.SET_NULL,
                                related_name="+",
                                to=settings.AUTH_USER_MODEL,
                            ),
                        ),
                        (
                            "tenant",
                            models.ForeignKey(
                                blank=True,
                                null=True,
                                on_delete=django.db.models.deletion.SET_NULL,
                                related_name="audit_events",
                                to="quotas.tenant",
                            ),
                        ),
                    ],
                    options={
                        "db_table": "portal_auditevent",
                        "ordering": ["-created", "-id"],
                        "indexes": [
                            models.Index(fields=["object_type", "object_id"], name="portal_audi_object__349d36_idx")
                        ],
                    },
                ),
            ],
            database_operations=[],
        ),
    ]
