import pytest

pytest_plugins = ["tests.world", "tests.k8sapi"]


@pytest.fixture(autouse=True)
def _fast_password_hashing(settings):
    """PBKDF2's deliberate slowness costs seconds per test world; tests do not need it."""
    settings.PASSWORD_HASHERS = ["django.contrib.auth.hashers.MD5PasswordHasher"]
