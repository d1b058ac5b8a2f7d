from django.apps import AppConfig


class RuntimeConfig(AppConfig):
    name = "runtime"
