"""The pinned model revision (issue 33): a column on the row, "" (the default branch, as before)
for every existing deployment, and the same value written into every stored revision spec, so a
revision from before reads and diffs like one from after."""

from django.db import migrations, models

from deployments.migrations._spec_keys import spec_key_added


class Migration(migrations.Migration):
    dependencies = [
        ("deployments", "0011_kv_cache_dtype"),
    ]

    operations = [
        migrations.AddField(
            model_name="modeldeployment",
            name="model_revision",
            field=models.CharField(
                blank=True,
                default="",
                help_text="The Hugging Face revision the engine loads (commit id, tag or branch; empty: the default "
                "branch). Taken from the catalog model the request names.",
                max_length=100,
            ),
        ),
        spec_key_added("model_revision", ""),
    ]
