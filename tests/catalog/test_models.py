"""A catalog row's rules: the source's syntax (the same rule as a deployment request's), a pinned
revision for the hub held to git's ref rules and to what an engine flag may carry, the gating
token, and the allow-list's source patterns."""

from __future__ import annotations

import os

import pytest

from catalog.models import CatalogModel
from catalog.patterns import clean_patterns, matching
from catalog.permissions import Standing
from catalog.services import catalog_model_create, catalog_model_update
from catalog.sources import revision_error
from core.exceptions import ConflictError, DomainError, Forbidden
from core.models import AuditEvent
from tests.catalog.conftest import COMMIT

HUB = "meta-llama/Meta-Llama-3-8B-Instruct"


def create(world, **values):
    base = {"name": "m", "display_name": "M", "source": HUB, "revision": COMMIT}
    return catalog_model_create(
        actor=world.users["platform_admin"], standing=Standing.PLATFORM_ADMIN, values=base | values
    )


def refusal(world, **values) -> tuple[str | None, str]:
    with pytest.raises(DomainError) as caught:
        create(world, **values)
    return caught.value.field, caught.value.message


class TestSources:
    @pytest.mark.parametrize(
        "source, words",
        [
            ("pvc://models/../../etc", "'..'"),
            ("s3://bucket//etc", "empty or '.' path segments"),
            ("pvc://models/%2e%2e/etc", "percent-encoding"),
            ("org\\model", "backslash"),
            ("org/model\n", "control characters"),
            ("org/mödel", "non-ASCII"),
            ("file:///etc/passwd", "Use a Hugging Face id"),
            ("http://evil.example/model", "Use a Hugging Face id"),
            ("gs://bucket/model", "Use a Hugging Face id"),
            ("/etc/passwd", "outside the model root"),
            ("", "cannot be blank"),
        ],
    )
    def test_it_refuses_a_hostile_source_with_the_requests_message(self, world, source, words):
        field, message = refusal(world, source=source, revision="")
        assert field == "source" and words in message
        assert not CatalogModel.objects.exists()

    def test_a_local_source_must_resolve_inside_the_model_root_even_through_a_link(self, world, settings, tmp_path):
        root, outside = tmp_path / "models", tmp_path / "secret"
        root.mkdir()
        outside.mkdir()
        os.symlink(outside, root / "link")
        settings.LOCAL_MODEL_ROOT = root
        field, message = refusal(world, source=f"{root}/link", revision="")
        assert field == "source" and "outside the model root" in message
        (root / "tiny").mkdir()
        assert create(world, source=f"{root}/tiny", revision="").kind == "local"

    @pytest.mark.parametrize("source", ["s3://team-bucket/llama", "pvc://models/llama"])
    def test_storage_sources_have_no_revision(self, world, source):
        assert refusal(world, source=source) == (
            "revision",
            "Only Hugging Face models have revisions: leave it empty for this source.",
        )
        assert create(world, source=source, revision="").kind == source[:3].rstrip(":")


class TestRevisions:
    def test_a_hub_model_needs_a_pin_or_an_explicit_default_branch(self, world):
        field, message = refusal(world, revision="")
        assert field == "revision" and "follow the default branch" in message
        row = create(world, revision="", follow_default_branch=True)
        assert row.revision == "" and row.follow_default_branch

    def test_pinning_and_following_at_once_is_refused(self, world):
        assert refusal(world, follow_default_branch=True)[0] == "follow_default_branch"

    @pytest.mark.parametrize("revision", [COMMIT, "v1.0", "main", "refs/pr/12", "release/2024-05"])
    def test_commit_ids_tags_and_branches_are_taken(self, revision):
        assert revision_error(revision) is None

    @pytest.mark.parametrize(
        "revision",
        [
            "--trust-remote-code",  # would read as another engine flag
            "-main",
            "main..evil",
            "main/",
            "/main",
            "a//b",
            ".hidden",
            "branch.lock",
            "main.",
            "main branch",
            "main\n--x",
            "$(reboot)",
            "main;rm",
            "m@{1}",
            "x" * 101,
        ],
    )
    def test_a_hostile_revision_is_refused(self, world, revision):
        assert revision_error(revision) is not None
        assert refusal(world, revision=revision)[0] == "revision"


class TestGating:
    def test_only_hub_models_are_gated(self, world):
        assert refusal(world, source="s3://team-bucket/m", revision="", gated=True)[0] == "gated"

    def test_a_named_secret_must_be_named_and_valid(self, world):
        assert refusal(world, gated=True, token_source="secret")[0] == "token_secret"
        assert refusal(world, gated=True, token_source="secret", token_secret="Bad_Name")[0] == "token_secret"
        assert refusal(world, token_secret="hf-token")[0] == "token_secret"  # not gated: no Secret
        row = create(world, gated=True, token_source="secret", token_secret="hf-llama")
        assert row.token_secret == "hf-llama"


class TestWrites:
    def test_create_and_change_are_audited_with_before_and_after(self, world):
        row = create(world)
        catalog_model_update(
            row_id=row.pk,
            actor=world.users["platform_admin"],
            standing=Standing.PLATFORM_ADMIN,
            values={"licence": "llama3"},
            reason="checked",
        )
        events = list(AuditEvent.objects.filter(object_type="catalog.catalogmodel").order_by("pk"))
        assert [e.action for e in events] == ["catalog.create", "catalog.update"]
        assert events[1].changes == {"from": {"licence": ""}, "to": {"licence": "llama3"}}
        assert events[1].reason == "checked"

    def test_the_name_is_unique_and_fixed(self, world):
        row = create(world)
        with pytest.raises(ConflictError):
            create(world)
        with pytest.raises(DomainError) as caught:
            catalog_model_update(row_id=row.pk, actor=None, standing=Standing.PLATFORM_ADMIN, values={"name": "other"})
        assert caught.value.field == "name"

    def test_a_signed_in_user_may_not_write(self, world):
        with pytest.raises(Forbidden):
            catalog_model_create(
                actor=world.users["member"],
                standing=Standing.SIGNED_IN,
                values={"name": "m", "display_name": "M", "source": HUB, "revision": COMMIT},
            )
        assert not CatalogModel.objects.exists()


class TestPatterns:
    def test_lines_become_patterns_without_blanks_or_repeats(self):
        assert clean_patterns("meta-llama/*\n\n  s3://team-bucket/*  \nmeta-llama/*") == (
            ["meta-llama/*", "s3://team-bucket/*"],
            None,
        )

    @pytest.mark.parametrize(
        "pattern",
        ["meta llama/*", "org/[ab]*", "s3://b/../*", "http://x/*", "org/%2e*", "a\\b", "x:y/*", "*" * 301],
    )
    def test_a_bad_pattern_is_refused_naming_its_line(self, pattern):
        patterns, problem = clean_patterns(f"ok/*\n{pattern}")
        assert patterns == [] and problem.startswith("Line 2")

    def test_a_star_crosses_slashes_but_the_whole_source_must_match(self):
        assert matching("s3://team-bucket/a/b", ["s3://team-bucket/*"]) == "s3://team-bucket/*"
        assert matching("s3://team-bucket-evil/a", ["s3://team-bucket/*"]) is None
        assert matching("meta-llama/Llama-3", ["meta-llama/*"]) == "meta-llama/*"
        assert matching("Meta-Llama/Llama-3", ["meta-llama/*"]) is None  # case-sensitive
