"""The OpenAPI schema tells clients both ways to send a token."""


def test_the_schema_offers_token_or_bearer_as_alternatives(world):
    schema = world.client("member").get("/api/schema/", HTTP_ACCEPT="application/json").json()
    schemes = schema["components"]["securitySchemes"]
    assert schemes["bearerAuth"] == {"type": "http", "scheme": "bearer"}
    assert schemes["tokenAuth"]["name"] == "Authorization" and '"Token"' in schemes["tokenAuth"]["description"]
    assert schema["paths"]["/api/v1/me/"]["get"]["security"][:2] == [{"tokenAuth": []}, {"bearerAuth": []}]


def test_the_schema_validates_without_a_warning(tmp_path):
    """`manage.py spectacular --validate --fail-on-warn`: every operation's types resolve (a path
    parameter or serializer field spectacular cannot type is a warning, and fails here)."""
    from django.core.management import call_command

    target = tmp_path / "schema.yml"
    call_command("spectacular", "--validate", "--fail-on-warn", "--file", str(target))
    text = target.read_text()
    assert "/api/v1/deployments/{id}/revisions/{number}/approve/:" in text
    assert "RevisionStatusEnum" in text
