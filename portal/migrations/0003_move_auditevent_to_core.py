"""AuditEvent now lives in core (core.0001 takes over its state); the table is kept."""

from django.db import migrations


class Migration(migrations.Migration):
    dependencies = [
        ("portal", "0002_audit_actor_name"),
        ("core", "0001_initial"),
    ]

    operations = [
        migrations.SeparateDatabaseAndState(
            state_operations=[migrations.DeleteModel(name="AuditEvent")],
            database_operations=[],
        ),
    ]
