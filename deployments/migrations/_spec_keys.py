"""A spec field added to the row is added to every stored revision spec too, with the value the row
gets, so a revision from before reads and diffs like one from after; backwards, the key goes.
Used by the migrations that add a spec field (0011, 0012, 0013). Django's loader skips modules
whose name starts with "_", so this is not a migration itself."""

from django.db import migrations


def spec_key_added(key: str, value) -> migrations.RunPython:
    def forwards(apps, schema_editor):
        revision = apps.get_model("deployments", "DeploymentRevision")
        for rev in revision.objects.exclude(spec__has_key=key).only("spec").iterator():
            rev.spec = {**rev.spec, key: value}
            rev.save(update_fields=["spec"])

    def backwards(apps, schema_editor):
        revision = apps.get_model("deployments", "DeploymentRevision")
        for rev in revision.objects.filter(spec__has_key=key).only("spec").iterator():
            rev.spec = {k: v for k, v in rev.spec.items() if k != key}
            rev.save(update_fields=["spec"])

    return migrations.RunPython(forwards, backwards)
