"""Served model names unique per tenant (issue 34): the tenant endpoint routes by the `model` a
client sends, so two of a tenant's deployments may not serve one name.

Before the constraint: an empty served name becomes the deployment's name (what the engine served
under it anyway), and where two deployments of a tenant that are not deleted served one name, the
older keeps it and each newer one serves `<name>-<id>` from now on, its serving revision saying the
same and its timeline saying why. Backwards only the constraint goes."""

from django.db import migrations, models

SUFFIXED = (
    "Served model names are unique per tenant now: another deployment of the tenant already served {old!r}, "
    "so this one serves {new!r}. Clients calling it by the old name must use the new one."
)


def unique_served_names(apps, schema_editor):
    deployment = apps.get_model("deployments", "ModelDeployment")
    event = apps.get_model("deployments", "DeploymentEvent")
    for dep in deployment.objects.filter(served_model_name="").only("name").iterator():
        dep.served_model_name = dep.name
        dep.save(update_fields=["served_model_name"])
    seen = set()
    for dep in deployment.objects.exclude(state="deleted").order_by("pk").iterator():
        key = (dep.tenant_id, dep.served_model_name)
        if key not in seen:
            seen.add(key)
            continue
        old, new = dep.served_model_name, f"{dep.served_model_name[:180]}-{dep.pk}"
        live = deployment.objects.filter(tenant_id=dep.tenant_id).exclude(state="deleted")
        tries = 1
        while (dep.tenant_id, new) in seen or live.filter(served_model_name=new).exists():
            tries += 1  # a name someone chose already looked like that
            new = f"{old[:170]}-{dep.pk}-{tries}"
        dep.served_model_name = new
        dep.save(update_fields=["served_model_name"])
        if dep.serving_revision_id:
            revision = dep.serving_revision
            revision.spec = {**revision.spec, "served_model_name": new}
            revision.save(update_fields=["spec"])
        event.objects.create(
            deployment=dep, type="Warning", reason="ServedNameChanged", message=SUFFIXED.format(old=old, new=new)
        )
        seen.add((dep.tenant_id, new))


class Migration(migrations.Migration):
    dependencies = [
        ("deployments", "0013_task"),
    ]

    operations = [
        migrations.RunPython(unique_served_names, migrations.RunPython.noop),
        migrations.AddConstraint(
            model_name="modeldeployment",
            constraint=models.UniqueConstraint(
                condition=models.Q(("state", "deleted"), _negated=True),
                fields=("tenant", "served_model_name"),
                name="unique_served_name_per_tenant",
            ),
        ),
    ]
