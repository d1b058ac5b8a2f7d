from django.db import migrations, models
from django.db.models import OuterRef, Subquery


def backfill(apps, schema_editor):
    """Existing entries: the user's name, or "system" where no user acted (auto-approvals before
    this migration were written with no actor and are indistinguishable from system actions)."""
    AuditEvent = apps.get_model("portal", "AuditEvent")
    User = apps.get_model("auth", "User")
    AuditEvent.objects.filter(actor__isnull=False).update(
        actor_name=Subquery(User.objects.filter(pk=OuterRef("actor_id")).values("username")[:1]))
    AuditEvent.objects.filter(actor__isnull=True).update(actor_name="system")


class Migration(migrations.Migration):
    dependencies = [
        ("portal", "0001_initial"),
        ("auth", "0012_alter_user_first_name_max_length"),
    ]

    operations = [
        migrations.AddField(
            model_name="auditevent",
            name="actor_name",
            field=models.CharField(blank=True, max_length=150),
        ),
        migrations.RunPython(backfill, migrations.RunPython.noop),
    ]
