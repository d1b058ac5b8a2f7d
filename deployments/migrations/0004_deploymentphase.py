import django.db.models.deletion
from django.db import migrations, models


class Migration(migrations.Migration):
    dependencies = [
        ("deployments", "0003_min_replicas_limit_from_the_table"),
    ]

    operations = [
        migrations.CreateModel(
            name="DeploymentPhase",
            fields=[
                ("id", models.BigAutoField(auto_created=True, primary_key=True, serialize=False, verbose_name="ID")),
                ("name", models.CharField(max_length=32)),
                ("at", models.DateTimeField()),
                (
                    "deployment",
                    models.ForeignKey(
                        on_delete=django.db.models.deletion.CASCADE,
                        related_name="phases",
                        to="deployments.modeldeployment",
                    ),
                ),
            ],
            options={
                "ordering": ["at", "id"],
                "constraints": [
                    models.UniqueConstraint(fields=("deployment", "name"), name="one_phase_row_per_deployment")
                ],
            },
        ),
    ]
