import pytest

pytest_plugins = [
    "tests.support.world",
    "tests.support.k8s.server",
    "tests.support.controlplane.fixtures",
    "tests.support.local_engine",
]


@pytest.fixture(autouse=True)
def _fast_password_hashing(settings):
    """PBKDF2's deliberate slowness costs seconds per test world; tests do not need it."""
    settings.PASSWORD_HASHERS = ["django.contrib.auth.hashers.MD5PasswordHasher"]
