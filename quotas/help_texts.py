"""Words the tenant policy's settings are explained in: the model's help texts, the policy form and the
API say the same (one place for each)."""

# What the tenant's gateway limits mean (runtime.manifests.gateway renders them: a counter per key,
# and Kuadrant counts per route); the model, the policy form and the API say it in these words.
TOKENS_PER_MINUTE_HELP = (
    "Per API key, on each endpoint, counted from the token usage each response reports. A streamed "
    "response counts only if the client asks for usage in the stream (the OpenAI stream option "
    "'include usage', as the endpoint's snippets do): set requests per minute too (0: no limit)."
)
REQUESTS_PER_MINUTE_HELP = (
    "Per API key, on each endpoint; also bounds the streamed requests whose tokens the gateway cannot count "
    "(0: no limit)."
)
# The activator (wake on request): how long a request to a deployment the policy stopped waits.
WAKE_TIMEOUT_HELP = (
    "How long a request to a deployment the idle policy or serving schedule stopped waits while it wakes; "
    "a client's X-Wake-Timeout header (seconds) overrides it. 0: answer 503 with Retry-After at once."
)
