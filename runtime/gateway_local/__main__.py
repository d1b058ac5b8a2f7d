"""`python -m runtime.gateway_local <directory>`: run the local gateway (runtime.gateway_local.app)."""

from runtime.gateway_local.app import main

main()
