"""A real control plane for tests and for developers (`scripts/cluster up`): see plane.py."""
