# A schema change only: the Kueue sync records on the flavor why its ResourceFlavor cannot be
# updated. Flavor rows keep their own node labels; llm-portal.io/flavor is added at render time.

from django.db import migrations, models


class Migration(migrations.Migration):
    dependencies = [
        ("quotas", "0003_budget_idle_access_provisioning_temporary"),
    ]

    operations = [
        migrations.AddField(
            model_name="gpuflavor",
            name="kueue_problem",
            field=models.TextField(
                blank=True,
                default="",
                editable=False,
                help_text="Why the Kueue sync cannot update this flavor's ResourceFlavor (empty: it is in sync).",
            ),
        ),
    ]
