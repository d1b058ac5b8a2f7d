"""The OpenAPI schema tells clients both ways to send a token."""


def test_the_schema_offers_token_or_bearer_as_alternatives(world):
    schema = world.client("member").get("/api/schema/", HTTP_ACCEPT="application/json").json()
    schemes = schema["components"]["securitySchemes"]
    assert schemes["bearerAuth"] == {"type": "http", "scheme": "bearer"}
    assert schemes["tokenAuth"]["name"] == "Authorization" and '"Token"' in schemes["tokenAuth"]["description"]
    assert schema["paths"]["/api/v1/me/"]["get"]["security"][:2] == [{"tokenAuth": []}, {"bearerAuth": []}]
