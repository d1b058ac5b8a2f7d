"""Helpers shared by the test suite and bench/: the test world, the Kubernetes API test server,
simulated operators, HTTP stubs, CRD validation, access to ../shared and deployment drafts."""
