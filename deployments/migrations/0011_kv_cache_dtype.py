"""The KV-cache dtype engine option (issue 33): a column on the row, "auto" (vLLM's default, the
model's dtype) for every existing deployment, and the same value written into every stored
revision spec, so a revision from before reads and diffs like one from after."""

from django.db import migrations, models


def spec_gets_auto(apps, schema_editor):
    revision = apps.get_model("deployments", "DeploymentRevision")
    for rev in revision.objects.exclude(spec__has_key="kv_cache_dtype").only("spec").iterator():
        rev.spec = {**rev.spec, "kv_cache_dtype": "auto"}
        rev.save(update_fields=["spec"])


def spec_loses_it(apps, schema_editor):
    revision = apps.get_model("deployments", "DeploymentRevision")
    for rev in revision.objects.filter(spec__has_key="kv_cache_dtype").only("spec").iterator():
        rev.spec = {k: v for k, v in rev.spec.items() if k != "kv_cache_dtype"}
        rev.save(update_fields=["spec"])


class Migration(migrations.Migration):
    dependencies = [
        ("deployments", "0010_alter_modeldeployment_backend"),
    ]

    operations = [
        migrations.AddField(
            model_name="modeldeployment",
            name="kv_cache_dtype",
            field=models.CharField(
                choices=[
                    ("auto", "auto (the model's dtype)"),
                    ("bfloat16", "bfloat16"),
                    ("float16", "float16"),
                    ("fp8", "FP8 (E4M3)"),
                    ("fp8_e4m3", "FP8 E4M3"),
                    ("fp8_e5m2", "FP8 E5M2"),
                ],
                default="auto",
                help_text="vLLM's --kv-cache-dtype: what the KV cache stores (auto: the model's dtype).",
                max_length=12,
            ),
        ),
        migrations.RunPython(spec_gets_auto, spec_loses_it),
    ]
