"""Start-up checks of the Karpenter AMI setting (portal.E002): an EC2NodeClass on `@latest` drifts
every GPU node on each AMI release (issue 39), so the portal refuses to start with it unless the
platform team opted in, and refuses a malformed alias before the first sync would."""

from __future__ import annotations

import pytest
from django.core.management import call_command
from django.core.management.base import SystemCheckError

from portal.checks import check_karpenter_ami


@pytest.fixture
def aws(settings):
    settings.KARPENTER_PLATFORM = "aws"
    settings.KARPENTER_NODE_ROLE = "KarpenterNodeRole-test"
    settings.KARPENTER_AMI_ALIAS = ""
    settings.KARPENTER_AMI_ALLOW_LATEST = False
    return settings


class TestKarpenterAmi:
    def test_the_shipped_defaults_pass_where_karpenter_is_not_configured(self):
        assert check_karpenter_ami(None) == []

    @pytest.mark.parametrize(
        ("alias", "message"),
        [
            ("", "KARPENTER_AMI_ALIAS: not set: pin an AMI release, e.g. al2023@v20240807."),
            ("al2023@latest", "@latest replaces every GPU node on each AMI release"),
            ("al2023-v20240807", "is not an AMI alias"),
        ],
    )
    def test_karpenter_on_aws_without_a_pinned_ami_stops_the_portal(self, aws, alias, message):
        aws.KARPENTER_AMI_ALIAS = alias
        with pytest.raises(SystemCheckError, match=r"portal\.E002") as refused:
            call_command("check")
        assert message in str(refused.value)

    def test_a_pinned_release_passes(self, aws):
        aws.KARPENTER_AMI_ALIAS = "al2023@v20240807"
        assert check_karpenter_ami(None) == []

    def test_latest_passes_only_with_the_opt_in(self, aws):
        aws.KARPENTER_AMI_ALIAS = "al2023@latest"
        assert [error.id for error in check_karpenter_ami(None)] == ["portal.E002"]
        aws.KARPENTER_AMI_ALLOW_LATEST = True
        assert check_karpenter_ami(None) == []

    def test_a_set_alias_is_checked_even_before_karpenter_is_configured(self, settings):
        settings.KARPENTER_NODE_ROLE = ""
        settings.KARPENTER_AMI_ALIAS = "al2023@20240807"
        (error,) = check_karpenter_ami(None)
        assert "al2023 AMI releases are named like al2023@v20240807" in error.msg
