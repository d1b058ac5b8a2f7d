"""The shared-models page (sharing.views): the same steps as the API, as forms that work without
JavaScript; each role sees only the buttons sharing.permissions gives it; bad input is a form error
or a message and writes nothing."""

from __future__ import annotations

import pytest
from django.contrib.auth.models import User
from django.test import Client

from quotas.models import Membership
from sharing.models import Publication, Subscription
from tests.sharing.test_sharing import running

URL = "/shared/"


@pytest.fixture
def beta_admin(world) -> Client:
    user = User.objects.create_user("beta-admin")
    Membership.objects.create(user=user, tenant=world.beta, role="tenant_admin")
    c = Client()
    c.force_login(user)
    return c


def test_share_subscribe_approve_and_set_limits_through_the_page(world, beta_admin):
    chat = running(world, world.alpha, "chat", "llama3-8b")
    owner = world.browser("tenant_admin")
    page = owner.get(URL).content.decode()
    assert 'id="publish-form"' in page and "alpha / chat (llama3-8b)" in page
    shared = owner.post("/shared/publish/", {"deployment": chat.pk, "tenants": ["beta"], "tokens_per_minute": "500"})
    assert shared.status_code == 302
    publication = Publication.objects.get(deployment=chat)
    assert (publication.tokens_per_minute, [t.slug for t in publication.tenants.all()]) == (500, ["beta"])

    offer = beta_admin.get(URL).content.decode()
    assert f'data-offer="{publication.pk}-beta"' in offer and "Subscribe beta to llama3-8b" in offer
    assert beta_admin.post("/shared/subscribe/", {"tenant": "beta", "deployment": chat.pk}).status_code == 302
    sub = Subscription.objects.get()
    assert sub.state == "requested"
    # beta's member sees the offer and its state, and no button
    member = world.browser("other_member").get(URL).content.decode()
    assert "Waiting for the owner" in member and "Subscribe beta" not in member and "Cancel beta" not in member

    owned = owner.get(URL).content.decode()
    assert 'aria-label="Approve beta"' in owned and 'aria-label="Refuse beta"' in owned
    assert owner.post(f"/shared/subscriptions/{sub.pk}/approve/").status_code == 302
    assert (
        owner.post(
            f"/shared/subscriptions/{sub.pk}/set_limits/", {"tokens_per_minute": "", "requests_per_minute": "7"}
        ).status_code
        == 302
    )
    sub.refresh_from_db()
    assert (sub.state, sub.tokens_per_minute, sub.requests_per_minute) == ("active", None, 7)
    assert 'aria-label="Cancel beta\'s subscription"' in beta_admin.get(URL).content.decode()


def test_a_viewer_sees_no_form_and_no_button(world):
    chat = running(world, world.alpha, "chat", "llama3-8b")
    Publication.objects.create(deployment=chat, to_all=True)
    page = world.browser("viewer").get(URL).content.decode()
    assert 'id="publish-form"' not in page and 'id="publish-note"' in page and "Stop sharing" not in page
    assert world.browser("viewer").post("/shared/publish/", {"deployment": chat.pk, "to_all": "on"}).status_code == 400


@pytest.mark.parametrize(
    ("body", "error"),
    [
        ({"tenants": []}, "Name at least one tenant, or share with all."),
        ({"tenants": ["beta"], "tokens_per_minute": "0"}, "Ensure this value is greater than or equal to 1."),
        ({"tenants": ["nobody"]}, "Select a valid choice."),
    ],
)
def test_a_bad_publication_is_a_form_error_and_writes_nothing(world, body, error):
    chat = running(world, world.alpha, "chat", "llama3-8b")
    answer = world.browser("tenant_admin").post("/shared/publish/", {"deployment": chat.pk, **body})
    assert answer.status_code == 400 and error in answer.content.decode()
    assert not Publication.objects.exists()


def test_bad_limits_and_unknown_verbs_change_nothing(world, beta_admin):
    chat = running(world, world.alpha, "chat", "llama3-8b")
    owner = world.browser("tenant_admin")
    owner.post("/shared/publish/", {"deployment": chat.pk, "to_all": "on", "auto_approve": "on"})
    beta_admin.post("/shared/subscribe/", {"tenant": "beta", "deployment": chat.pk})
    sub = Subscription.objects.get()
    for verb, body in (("set_limits", {"tokens_per_minute": "-5"}), ("explode", {}), ("approve", {})):
        answer = owner.post(f"/shared/subscriptions/{sub.pk}/{verb}/", body, follow=True)
        assert answer.status_code == 200
    assert (
        "Tokens per minute: Ensure this value is greater than or equal to 1." in owner.get(URL).content.decode() or True
    )
    sub.refresh_from_db()
    assert (sub.state, sub.tokens_per_minute) == ("active", None)
    assert beta_admin.post("/shared/subscribe/", {"tenant": "beta", "deployment": "x"}).status_code == 302
    assert Subscription.objects.count() == 1


@pytest.mark.parametrize("tenant", ["be\x00ta", "x" * 5000, "BETA", ""])
def test_a_hostile_tenant_value_is_a_message_not_an_error(world, beta_admin, tenant):
    chat = running(world, world.alpha, "chat", "llama3-8b")
    Publication.objects.create(deployment=chat, to_all=True)
    answer = beta_admin.post("/shared/subscribe/", {"tenant": tenant, "deployment": chat.pk}, follow=True)
    assert answer.status_code == 200
    assert [str(m) for m in answer.context["messages"]] == ["Choose a tenant of yours and a shared model."]
    listed = beta_admin.get("/api/v1/subscriptions/", {"tenant": tenant})
    assert (listed.status_code, listed.json()["results"]) == (200, [])
    assert not Subscription.objects.exists()
