"""The local gateway: the front door of the local backend's engines on this machine.

One aiohttp process (`python -m runtime.gateway_local <LOCAL_RUNTIME_DIR>`) serves every tenant:
one listening port per tenant (`/v1` routed by the request's `model`, `/v1/models` answered for
the key presented) and one per deployment (everything to that deployment: the endpoint URL a
deployment page shows). It checks API keys against SHA-256 digests, so it never holds a user's
key; passes responses through (SSE streams event by event); and appends each response's `usage`
to a JSONL file (`usage.read_usage` reads it back for the ledger).

What it serves is the routing file (`routes.ROUTES_FILE`), written atomically by the local
backend (`runtime.backends.local.gateway`) whenever an engine starts or stops or a key is minted
or revoked; the gateway stats it on every request and re-reads it when it changed, so a key
change takes effect on the next request and never restarts an engine or moves a port.

Imports only the standard library and aiohttp: it runs as its own process, outside Django.
Modules: `routes` (the table and its checks), `usage` (usage from JSON and SSE, the JSONL log),
`app` (the aiohttp server and client).
"""
