"""What a new user meets first (issue 19): the portal's own error pages, audit codes in words,
times without microseconds, quiet logs for expected conditions, the favicon, compressed static
files with hashed names, and the quota-change form's current values."""

from __future__ import annotations

import logging

import pytest
from django.test import override_settings


class TestErrorPages:
    def test_404_and_403_are_the_portals_pages_with_navigation(self, world):
        client = world.browser("member")
        missing = client.get("/deployments/987654/")
        assert missing.status_code == 404
        page = missing.content.decode()
        assert "Page not found" in page and 'aria-label="Main"' in page and "/deployments/987654/" in page
        refused = client.get("/approvals/")
        assert refused.status_code == 403
        assert "Not allowed" in refused.content.decode() and 'aria-label="Main"' in refused.content.decode()

    def test_a_viewer_asking_for_the_request_form_is_told_why(self, world):
        refused = world.browser("viewer").get("/deployments/new/")
        assert refused.status_code == 403
        assert "viewers can look, not request" in refused.content.decode()

    def test_500_renders_without_a_request(self):
        from django.template import loader

        page = loader.get_template("500.html").render()
        assert "Something went wrong on our side" in page and "<html" in page

    def test_403_is_not_logged_with_a_traceback(self, world, caplog):
        with caplog.at_level(logging.INFO):
            world.browser("member").get("/approvals/")
        assert not [r for r in caplog.records if r.name.startswith("django.request")]


class TestQuietWithoutACluster:
    def test_the_kueue_sync_is_skipped_with_a_note_not_an_error(self, world, settings, caplog):
        from quotas.tasks import sync_kueue_task

        settings.KUBERNETES_URL, settings.KUBECONFIG = None, None
        with caplog.at_level(logging.INFO, logger="quotas.tasks"):
            assert sync_kueue_task.apply().get() == 0
        assert [r.levelname for r in caplog.records if r.name == "quotas.tasks"] == ["INFO"]


class TestWords:
    def test_audit_codes_read_as_words(self, world):
        from quotas import services

        services.quota_change_request_create(
            tenant=world.alpha,
            user=world.users["tenant_admin"],
            flavor=world.h100,
            nominal_gpus=10,
            borrowing_limit_gpus=4,
            lending_limit_gpus=None,
            justification="More traffic.",
        )
        page = world.browser("tenant_admin").get("/quotas/alpha/").content.decode()
        assert "Quota change requested" in page and ">quota_change.request<" not in page

    @pytest.mark.parametrize(
        "raw, shown",
        [
            ("2026-12-01T04:31:07.123456Z", "2026-12-01 04:31:07 UTC"),
            ("2026-12-01T06:31:07+02:00", "2026-12-01 04:31:07 UTC"),
            ("not a time", "not a time"),
            (None, ""),
        ],
    )
    def test_times_are_shown_to_the_second_in_utc(self, raw, shown):
        from portal.templatetags.portal_tags import plain_time

        assert plain_time(raw) == shown

    def test_the_quota_form_carries_each_flavors_current_values(self, world):
        import json
        import re

        from quotas.models import TenantQuota

        TenantQuota.objects.filter(tenant=world.alpha, flavor=world.h100).update(borrowing_limit_gpus=8)
        page = world.browser("tenant_admin").get("/quotas/alpha/").content.decode()
        current = json.loads(re.search(r'<script[^>]*\bid="current-quota"[^>]*>(.*?)</script>', page).group(1))
        quota = TenantQuota.objects.get(tenant=world.alpha, flavor=world.h100)
        assert current[str(world.h100.pk)] == {
            "nominal_gpus": quota.nominal_gpus,
            "borrowing_limit_gpus": 8,
            "lending_limit_gpus": quota.lending_limit_gpus,
        }
        assert 'data-prefill="current-quota"' in page


class TestStatic:
    def test_favicon_ico_points_at_the_icon(self, client):
        response = client.get("/favicon.ico")
        assert response.status_code == 301 and response["Location"].endswith("portal/favicon.svg")

    def test_collectstatic_writes_hashed_and_compressed_files(self, tmp_path):
        """The storage the demo and production use: names carry a content hash, and a gzip copy
        sits beside each text file (WhiteNoise serves it to clients that accept gzip)."""
        from django.contrib.staticfiles.storage import staticfiles_storage
        from django.core.management import call_command
        from django.utils.functional import empty

        storages = {
            "default": {"BACKEND": "django.core.files.storage.FileSystemStorage"},
            "staticfiles": {"BACKEND": "whitenoise.storage.CompressedManifestStaticFilesStorage"},
        }
        with override_settings(STATIC_ROOT=tmp_path, STORAGES=storages):
            staticfiles_storage._wrapped = empty
            call_command("collectstatic", interactive=False, verbosity=0)
            url = staticfiles_storage.url("plotly/plotly.min.js")
        staticfiles_storage._wrapped = empty
        name = url.rsplit("/", 1)[1]
        assert name.startswith("plotly.min.") and name != "plotly.min.js"
        hashed = tmp_path / "plotly" / name
        compressed = hashed.with_name(name + ".gz")
        assert hashed.exists() and compressed.exists()
        assert compressed.stat().st_size < hashed.stat().st_size / 3


class TestDemo:
    def test_the_demo_runs_twice_and_shows_a_change_waiting_beside_what_serves(self, db):
        from io import StringIO

        from django.core.management import call_command

        from deployments.models import ModelDeployment

        for _ in range(2):  # idempotent: the second run adds nothing
            call_command("demo", stdout=StringIO())
        shown = {
            d.name: (d.state, d.serving_revision.number if d.serving_revision else None, d.proposed_number)
            for d in ModelDeployment.objects.all()
        }
        assert shown == {"llama3-70b-chat": ("approved", 1, 2), "qwen-7b-rerank": ("pending_approval", None, 1)}
