pytest_plugins = ["tests.world", "tests.k8sapi"]
