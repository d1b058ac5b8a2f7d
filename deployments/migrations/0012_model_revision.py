"""The pinned model revision (issue 33): a column on the row, "" (the default branch, as before)
for every existing deployment, and the same value written into every stored revision spec, so a
revision from before reads and diffs like one from after."""

from django.db import migrations, models


def spec_gets_default_branch(apps, schema_editor):
    revision = apps.get_model("deployments", "DeploymentRevision")
    for rev in revision.objects.exclude(spec__has_key="model_revision").only("spec").iterator():
        rev.spec = {**rev.spec, "model_revision": ""}
        rev.save(update_fields=["spec"])


def spec_loses_it(apps, schema_editor):
    revision = apps.get_model("deployments", "DeploymentRevision")
    for rev in revision.objects.filter(spec__has_key="model_revision").only("spec").iterator():
        rev.spec = {k: v for k, v in rev.spec.items() if k != "model_revision"}
        rev.save(update_fields=["spec"])


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
        migrations.RunPython(spec_gets_default_branch, spec_loses_it),
    ]
