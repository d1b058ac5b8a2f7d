"""MetricSample and ScrapeState now live in the metrics app (metrics.0001 takes over their
state); the tables are kept."""

from django.db import migrations


class Migration(migrations.Migration):
    dependencies = [
        ("deployments", "0001_initial"),
        ("metrics", "0001_initial"),
    ]

    operations = [
        migrations.SeparateDatabaseAndState(
            state_operations=[
                migrations.DeleteModel(name="MetricSample"),
                migrations.DeleteModel(name="ScrapeState"),
            ],
            database_operations=[],
        ),
    ]
