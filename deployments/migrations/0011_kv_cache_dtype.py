"""The KV-cache dtype engine option (issue 33): a column on the row, "auto" (vLLM's default, the
model's dtype) for every existing deployment, and the same value written into every stored
revision spec, so a revision from before reads and diffs like one from after."""

from django.db import migrations, models

from deployments.migrations._spec_keys import spec_key_added


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
        spec_key_added("kv_cache_dtype", "auto"),
    ]
