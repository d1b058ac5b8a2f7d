"""Settings for the LLM serving portal: one file, every knob from the environment.

With nothing set this is the zero-setup demo (SQLite, a file-system Celery broker, DEBUG on).
Production and the tests set DATABASE_URL (PostgreSQL) and CELERY_BROKER_URL (Redis).
Every helper in portal.env refuses a malformed value at start-up instead of guessing.
"""

from __future__ import annotations

from datetime import timedelta
from pathlib import Path

import plotly
from django.core.exceptions import ImproperlyConfigured

from core.jsonlog import FORMATS as LOG_FORMATS
from core.jsonlog import logging_config
from portal.env import (
    env_bool,
    env_choice,
    env_database,
    env_float,
    env_int,
    env_list,
    env_str,
    env_url,
)
from runtime import preemption as _preemption
from runtime.backends import names as _registered_backends

BASE_DIR = Path(__file__).resolve().parent.parent
VAR_DIR = Path(env_str("PORTAL_VAR_DIR", str(BASE_DIR / "var")))

DEBUG = env_bool("DEBUG", default=False) if env_str("DATABASE_URL") else env_bool("DEBUG", True)
_DEV_KEY = "demo-only-" + "k" * 50
SECRET_KEY = env_str("SECRET_KEY") or (_DEV_KEY if DEBUG else None)
if not SECRET_KEY:
    raise ImproperlyConfigured("SECRET_KEY must be set when DEBUG is off")
if not DEBUG and SECRET_KEY == _DEV_KEY:
    raise ImproperlyConfigured("SECRET_KEY must not be the demo key when DEBUG is off")
ALLOWED_HOSTS = env_list("ALLOWED_HOSTS", ["localhost", "127.0.0.1", "[::1]"])
CSRF_TRUSTED_ORIGINS = env_list("CSRF_TRUSTED_ORIGINS", [])

INSTALLED_APPS = [
    "django.contrib.admin",
    "django.contrib.auth",
    "django.contrib.contenttypes",
    "django.contrib.sessions",
    "django.contrib.messages",
    "django.contrib.staticfiles",
    "rest_framework",
    "knox",
    "drf_spectacular",
    "drf_spectacular_sidecar",
    "csp",
    "django_filters",
    "django_htmx",
    "django_celery_beat",
    "axes",
    "core",
    "portal",
    "catalog",
    "quotas",
    "deployments",
    "sharing",
    "metrics",
    "access",
    "usage",
    "reclaim",
    "runtime",
]

MIDDLEWARE = [
    "django.middleware.security.SecurityMiddleware",
    # Before anything reads request.GET/POST: a charset nothing can decode is a 400, not a 500.
    "portal.middleware.RequestFramingMiddleware",
    "whitenoise.middleware.WhiteNoiseMiddleware",
    "csp.middleware.CSPMiddleware",
    "django.contrib.sessions.middleware.SessionMiddleware",
    "django.middleware.common.CommonMiddleware",
    "django.middleware.csrf.CsrfViewMiddleware",
    "django.contrib.auth.middleware.AuthenticationMiddleware",
    "portal.auditing.AuditOriginMiddleware",  # audit rows carry the client address and user agent
    "django.contrib.messages.middleware.MessageMiddleware",
    "django.middleware.clickjacking.XFrameOptionsMiddleware",
    "django_htmx.middleware.HtmxMiddleware",
    "core.observability.MetricsMiddleware",
    "portal.middleware.DataErrorMiddleware",
    # Last, as axes asks: it turns a request it flagged as locked out into the 429 answer.
    "axes.middleware.AxesMiddleware",
]

ROOT_URLCONF = "portal.urls"
WSGI_APPLICATION = "portal.wsgi.application"

TEMPLATES = [
    {
        "BACKEND": "django.template.backends.django.DjangoTemplates",
        "DIRS": [BASE_DIR / "templates"],
        "APP_DIRS": True,
        "OPTIONS": {
            "context_processors": [
                "django.template.context_processors.request",
                "django.contrib.auth.context_processors.auth",
                "django.contrib.messages.context_processors.messages",
                "portal.context_processors.navigation",
            ],
        },
    },
]

DATABASES = {"default": env_database("DATABASE_URL", f"sqlite:///{VAR_DIR / 'demo.sqlite3'}")}
DATABASES["default"]["CONN_MAX_AGE"] = env_int("DB_CONN_MAX_AGE", 0, minimum=0)
DATABASES["default"]["ATOMIC_REQUESTS"] = False
if DATABASES["default"]["ENGINE"].endswith("sqlite3"):
    # The demo's web, worker and beat share one file. WAL lets readers run beside the writer;
    # IMMEDIATE transactions take the write lock up front, so two writers queue (busy timeout)
    # instead of failing with "database is locked" when a read lock cannot be upgraded.
    DATABASES["default"]["OPTIONS"] = {
        "timeout": 30,
        "transaction_mode": "IMMEDIATE",
        "init_command": "PRAGMA journal_mode=WAL; PRAGMA synchronous=NORMAL;",
    }
DEFAULT_AUTO_FIELD = "django.db.models.BigAutoField"

AUTH_PASSWORD_VALIDATORS = [
    {"NAME": "django.contrib.auth.password_validation.UserAttributeSimilarityValidator"},
    {"NAME": "django.contrib.auth.password_validation.MinimumLengthValidator"},
]
LOGIN_URL = "login"
LOGIN_REDIRECT_URL = "home"
LOGOUT_REDIRECT_URL = "login"

LANGUAGE_CODE = "en-us"
TIME_ZONE = "UTC"
USE_I18N = True
USE_TZ = True

STATIC_URL = "/static/"
STATIC_ROOT = VAR_DIR / "staticfiles"
# plotly.js comes from the pinned plotly package and htmx from django-htmx: no CDN, no vendoring.
STATICFILES_DIRS = [
    BASE_DIR / "static",
    ("plotly", Path(plotly.__file__).parent / "package_data"),
]
# collectstatic writes gzip (and brotli, where installed) copies beside files whose names carry a
# content hash, and WhiteNoise serves them compressed with a year-long cache lifetime: plotly.min.js
# goes over the wire at a fraction of its 4.8 MB and once per release. The manifest exists only after
# collectstatic (scripts/demo, the Dockerfile); the unit tests never run it and set STATIC_MANIFEST=false.
STATIC_MANIFEST = env_bool("STATIC_MANIFEST", default=True)
STORAGES = {
    "default": {"BACKEND": "django.core.files.storage.FileSystemStorage"},
    "staticfiles": {
        "BACKEND": "whitenoise.storage.CompressedManifestStaticFilesStorage"
        if STATIC_MANIFEST
        else "whitenoise.storage.CompressedStaticFilesStorage"
    },
}
WHITENOISE_USE_FINDERS = DEBUG

CACHES = {"default": {"BACKEND": "django.core.cache.backends.locmem.LocMemCache"}}
_cache_url = env_url("CACHE_URL", None, schemes={"redis", "rediss", "locmem"})
if _cache_url and _cache_url.startswith("redis"):
    CACHES["default"] = {"BACKEND": "django.core.cache.backends.redis.RedisCache", "LOCATION": _cache_url}

# --- security (production defaults; HTTPS=false only for plain-HTTP dev and tests) -------------
HTTPS = env_bool("HTTPS", default=not DEBUG)
SECURE_SSL_REDIRECT = HTTPS
SESSION_COOKIE_SECURE = HTTPS
CSRF_COOKIE_SECURE = HTTPS
SECURE_HSTS_SECONDS = env_int("SECURE_HSTS_SECONDS", 31536000 if HTTPS else 0, minimum=0)
SECURE_HSTS_INCLUDE_SUBDOMAINS = HTTPS
SECURE_HSTS_PRELOAD = HTTPS
SECURE_PROXY_SSL_HEADER = ("HTTP_X_FORWARDED_PROTO", "https") if HTTPS else None
# The probes, and Prometheus scraping a pod by its IP over plain http (the chart's ServiceMonitor).
SECURE_REDIRECT_EXEMPT = [r"^healthz$", r"^readyz$", r"^metrics$"]
SECURE_CONTENT_TYPE_NOSNIFF = True
SECURE_REFERRER_POLICY = "same-origin"
SESSION_COOKIE_HTTPONLY = True
SESSION_COOKIE_AGE = env_int("SESSION_COOKIE_AGE", 12 * 3600, minimum=60)
X_FRAME_OPTIONS = "DENY"
# Content-Security-Policy (django-csp 4): every script, style, image and request is the portal's own,
# and nothing is 'unsafe-inline' or 'unsafe-eval'. The UI has no inline <script>, event-handler or
# style attribute: behaviour lives in static/portal/*.js, data in data-* attributes and json_script.
# htmx runs with allowEval and allowScriptTags off and injects no indicator <style> (templates/base.html);
# plotly.js finds the <style> elements it would inject already stood in for (templates/portal/_plotly.html).
# The API docs pages add a nonce and, for Redoc, two style hashes and blob: workers (portal/urls.py).
# tests/browser/test_csp.py visits every page in Chromium and fails on any violation.
CONTENT_SECURITY_POLICY = {
    "DIRECTIVES": {
        "default-src": ["'self'"],
        "script-src": ["'self'"],
        "style-src": ["'self'"],
        # data: the SVG favicon and Swagger UI's CSS icons; blob: Plotly's "Download plot as a PNG", which
        # draws the chart as an image from a blob: URL (only a script of the page can make one).
        "img-src": ["'self'", "data:", "blob:"],
        "font-src": ["'self'"],
        "connect-src": ["'self'"],
        "object-src": ["'none'"],
        "base-uri": ["'self'"],
        "form-action": ["'self'"],
        "frame-ancestors": ["'none'"],
    },
}

# --- failed sign-ins (django-axes): browser form, /admin/ and API tokens ------------------------
# Reverse proxies in front of the portal that each append the address they saw to X-Forwarded-For.
# 0: the client is REMOTE_ADDR and a client-sent X-Forwarded-For is ignored (it is forgeable).
TRUSTED_PROXY_COUNT = env_int("TRUSTED_PROXY_COUNT", 0, minimum=0, maximum=10)
if env_str("THROTTLE_LOGIN"):
    raise ImproperlyConfigured("THROTTLE_LOGIN is gone: use LOGIN_FAILURE_LIMIT and LOGIN_COOLOFF_SECONDS")
AXES_HANDLER = "axes.handlers.cache.AxesCacheHandler"  # counts live in CACHE_URL (Redis), shared by all web pods
AXES_FAILURE_LIMIT = env_int("LOGIN_FAILURE_LIMIT", 20, minimum=1)  # the Nth failure locks the address out
# The lockout lasts this long after the address's last failure; failing during it starts it again.
AXES_COOLOFF_TIME = timedelta(seconds=env_int("LOGIN_COOLOFF_SECONDS", 300, minimum=1))
AXES_LOCKOUT_PARAMETERS = ["ip_address"]  # per address: a guesser cannot lock a named user out from afar
AXES_CLIENT_IP_CALLABLE = "portal.login.client_ip"  # TRUSTED_PROXY_COUNT; axes' ipware path needs a package
AXES_LOCKOUT_CALLABLE = "portal.login.lockout_response"  # 429, JSON for API clients
# axes.W001 says the same as portal.W001 (portal/checks.py) but on every `runserver` and `migrate` of
# the demo and the tests, whose one process is fine with a local cache; ours speaks under --deploy.
SILENCED_SYSTEM_CHECKS = ["axes.W001"]

# --- REST API ----------------------------------------------------------------------------------
REST_FRAMEWORK = {
    "DEFAULT_AUTHENTICATION_CLASSES": [
        "portal.auth.TokenAuthentication",
        "rest_framework.authentication.SessionAuthentication",
    ],
    "DEFAULT_PERMISSION_CLASSES": ["rest_framework.permissions.IsAuthenticated"],
    "DEFAULT_SCHEMA_CLASS": "drf_spectacular.openapi.AutoSchema",
    # DRF's parsers, hardened: nesting limit, strict encodings, no silent empty multipart.
    "DEFAULT_PARSER_CLASSES": [
        "portal.parsers.JSONParser",
        "portal.parsers.FormParser",
        "portal.parsers.MultiPartParser",
    ],
    "DEFAULT_FILTER_BACKENDS": ["django_filters.rest_framework.DjangoFilterBackend"],
    "DEFAULT_PAGINATION_CLASS": "core.pagination.BoundedLimitOffsetPagination",
    "PAGE_SIZE": 100,
    "EXCEPTION_HANDLER": "core.exceptions.api_exception_handler",
    "DEFAULT_THROTTLE_CLASSES": [
        "rest_framework.throttling.UserRateThrottle",
        "rest_framework.throttling.AnonRateThrottle",
    ],
    "DEFAULT_THROTTLE_RATES": {
        "user": env_str("THROTTLE_USER", "6000/min"),
        "anon": env_str("THROTTLE_ANON", "120/min"),
        "writes": env_str("THROTTLE_WRITES", "1200/min"),
    },
    "TEST_REQUEST_DEFAULT_FORMAT": "json",
    # DRF's per-address throttles read the client address as axes does (portal.login.client_ip);
    # left unset, DRF would trust whatever X-Forwarded-For a client sends.
    "NUM_PROXIES": TRUSTED_PROXY_COUNT,
}
SPECTACULAR_SETTINGS = {
    "TITLE": "LLM Serving Portal API",
    "DESCRIPTION": "Tenants, GPU quotas, model deployments (KubeRay / KServe / local) and their metrics.",
    "VERSION": "1.0.0",
    "SERVE_INCLUDE_SCHEMA": False,
    "COMPONENT_SPLIT_REQUEST": True,
    "SCHEMA_PATH_PREFIX": r"/api/v1",
    # Deployment state and event from/to states share one choice set: one enum, not three names.
    "ENUM_NAME_OVERRIDES": {
        "DeploymentStateEnum": "deployments.choices.State",
        "RevisionStatusEnum": "deployments.choices.RevisionStatus",
    },
    # Swagger UI and Redoc come from the pinned drf-spectacular-sidecar package: no CDN, works offline.
    "SWAGGER_UI_DIST": "SIDECAR",
    "SWAGGER_UI_FAVICON_HREF": "SIDECAR",
    "REDOC_DIST": "SIDECAR",
    # Swagger UI's default validatorUrl sends the schema URL to validator.swagger.io for a badge.
    "SWAGGER_UI_SETTINGS": {"deepLinking": True, "validatorUrl": None},
}
KNOX_TOKEN_MODEL = "portal.ApiToken"
REST_KNOX = {
    "TOKEN_MODEL": "portal.ApiToken",
    "TOKEN_TTL": timedelta(days=env_int("API_TOKEN_TTL_DAYS", 90, minimum=1, maximum=3650)),
    "AUTO_REFRESH": False,
    "AUTH_HEADER_PREFIX": "Token",
    "TOKEN_PREFIX": "llmp_",
}

# --- bounds on what people create (core.limits: a 400 naming the limit when it is reached) ------
MAX_API_TOKENS_PER_USER = env_int("MAX_API_TOKENS_PER_USER", 50, minimum=1, maximum=10_000)  # unexpired
MAX_API_KEYS_PER_USER = env_int("MAX_API_KEYS_PER_USER", 100, minimum=1, maximum=100_000)  # active, all tenants
MAX_DEPLOYMENTS_PER_TENANT = env_int("MAX_DEPLOYMENTS_PER_TENANT", 500, minimum=1, maximum=100_000)  # not deleted

# --- OIDC (optional, purely by environment) ----------------------------------------------------
OIDC_ENABLED = bool(env_str("OIDC_OP_DISCOVERY_ISSUER") or env_str("OIDC_RP_CLIENT_ID"))
AUTHENTICATION_BACKENDS = ["axes.backends.AxesStandaloneBackend", "django.contrib.auth.backends.ModelBackend"]
if OIDC_ENABLED:
    INSTALLED_APPS.append("mozilla_django_oidc")
    AUTHENTICATION_BACKENDS.insert(1, "portal.oidc.PortalOIDCBackend")  # after axes
    OIDC_RP_CLIENT_ID = env_str("OIDC_RP_CLIENT_ID", required=True)
    OIDC_RP_CLIENT_SECRET = env_str("OIDC_RP_CLIENT_SECRET", required=True)
    OIDC_RP_SIGN_ALGO = env_choice("OIDC_RP_SIGN_ALGO", "RS256", {"RS256", "HS256", "ES256"})
    OIDC_OP_AUTHORIZATION_ENDPOINT = env_url("OIDC_OP_AUTHORIZATION_ENDPOINT", None, schemes={"https", "http"})
    OIDC_OP_TOKEN_ENDPOINT = env_url("OIDC_OP_TOKEN_ENDPOINT", None, schemes={"https", "http"})
    OIDC_OP_USER_ENDPOINT = env_url("OIDC_OP_USER_ENDPOINT", None, schemes={"https", "http"})
    OIDC_OP_JWKS_ENDPOINT = env_url("OIDC_OP_JWKS_ENDPOINT", None, schemes={"https", "http"})
    if not all([OIDC_OP_AUTHORIZATION_ENDPOINT, OIDC_OP_TOKEN_ENDPOINT, OIDC_OP_USER_ENDPOINT]):
        raise ImproperlyConfigured("OIDC needs OIDC_OP_AUTHORIZATION/TOKEN/USER_ENDPOINT")
    OIDC_RP_SCOPES = env_str("OIDC_RP_SCOPES", "openid email profile groups")
    OIDC_USE_PKCE = env_bool("OIDC_USE_PKCE", True)
    OIDC_CALLBACK_CLASS = "portal.oidc_callback.AuditedOIDCCallbackView"  # a refusal by the provider is audited
# Group roles, SCIM and the first platform admin (portal/settings_identity.py).
from portal.settings_identity import (  # noqa: E402, F401 - settings are module attributes
    OIDC_GROUP_ROLES,
    OIDC_GROUPS_CLAIM,
    OIDC_PLATFORM_ADMIN_GROUPS,
    OIDC_USERNAME_CLAIM,
    PASSWORD_RESET_TIMEOUT,
    PLATFORM_ADMIN_EMAIL,
    PLATFORM_ADMIN_PASSWORD_FILE,
    PLATFORM_ADMIN_USERNAME,
    SCIM_BEARER_TOKEN,
    SCIM_BEARER_TOKEN_FILE,
)

# --- Celery ------------------------------------------------------------------------------------
# A host name, though the file-system transport ignores it: without one kombu warns "No hostname
# was supplied" at every start of the demo.
_broker_default = "filesystem://localhost/"
CELERY_BROKER_URL = env_url(
    "CELERY_BROKER_URL", _broker_default, schemes={"redis", "rediss", "amqp", "filesystem", "memory"}
)
if CELERY_BROKER_URL.startswith("filesystem://"):
    # The demo's broker needs no server: messages are files that web, worker and beat share,
    # written whole before they can be taken (portal/broker.py says why kombu's own does not).
    # An explicit transport wins over the URL's scheme in kombu's Connection.
    CELERY_BROKER_TRANSPORT = "portal.broker:Transport"
    _queue_dir = VAR_DIR / "broker"
    CELERY_BROKER_TRANSPORT_OPTIONS = {
        "data_folder_in": str(_queue_dir),
        "data_folder_out": str(_queue_dir),
        "processed_folder": str(VAR_DIR / "broker-processed"),
        "store_processed": False,
        # kombu's exchange tables; its default is ./control in the working directory.
        "control_folder": str(VAR_DIR / "broker-control"),
    }
else:
    CELERY_BROKER_TRANSPORT_OPTIONS = {
        # acks_late tasks are redelivered after this long if a worker dies holding them.
        "visibility_timeout": env_int("CELERY_VISIBILITY_TIMEOUT", 300, minimum=10),
    }
CELERY_BROKER_CONNECTION_TIMEOUT = 3
CELERY_BROKER_CONNECTION_RETRY_ON_STARTUP = True
CELERY_TASK_ALWAYS_EAGER = env_bool("CELERY_TASK_ALWAYS_EAGER", False)
CELERY_TASK_ACKS_LATE = True
CELERY_TASK_REJECT_ON_WORKER_LOST = True
CELERY_WORKER_PREFETCH_MULTIPLIER = 1
CELERY_TASK_IGNORE_RESULT = True
CELERY_TASK_SERIALIZER = "json"
CELERY_ACCEPT_CONTENT = ["json"]
CELERY_BEAT_SCHEDULER = "django_celery_beat.schedulers:DatabaseScheduler"
RECONCILE_SWEEP_SECONDS = env_int("RECONCILE_SWEEP_SECONDS", 30, minimum=1)
METRICS_SCRAPE_SECONDS = env_int("METRICS_SCRAPE_SECONDS", 15, minimum=1)
CELERY_BEAT_SCHEDULE = {
    "reconcile-sweep": {
        "task": "deployments.tasks.sweep_task",
        "schedule": float(RECONCILE_SWEEP_SECONDS),
    },
    "kueue-sync": {
        "task": "quotas.tasks.sync_kueue_task",
        "schedule": float(env_int("KUEUE_SYNC_SECONDS", 300, minimum=5)),
    },
    "metrics-scrape": {
        "task": "metrics.tasks.scrape_metrics_task",
        "schedule": float(METRICS_SCRAPE_SECONDS),
    },
    "metrics-downsample": {
        "task": "metrics.tasks.downsample_metrics_task",
        "schedule": 600.0,
    },
    "usage-refresh": {  # the usage ledger, then the monthly budgets (usage.tasks)
        "task": "usage.tasks.refresh_usage_task",
        "schedule": 300.0,
    },
    "access-tenant-endpoints": {  # each tenant's endpoint on the Gateway (access.tenant_endpoint)
        "task": "access.tasks.apply_tenant_endpoints_task",
        "schedule": 30.0,
    },
    "access-key-usage": {  # requests and tokens per API key from the local gateway's log (access.key_usage)
        "task": "access.tasks.count_key_usage_task",
        "schedule": 60.0,
    },
    "access-expire-keys": {
        "task": "access.tasks.expire_keys_task",
        "schedule": 60.0,
    },
    "reclaim-idle": {  # idle warnings and stops (reclaim.idle)
        "task": "reclaim.tasks.idle_sweep_task",
        "schedule": 300.0,
    },
    "reclaim-schedules": {  # serving schedules stop and start deployments (reclaim.schedules)
        "task": "reclaim.tasks.schedule_sweep_task",
        "schedule": 60.0,
    },
    "quota-temporary-revert": {  # temporary quota ends (quotas.temporary)
        "task": "quotas.tasks.revert_temporary_quota_task",
        "schedule": 60.0,
    },
    "audit-purge": {  # AUDIT_RETENTION_DAYS (core.tasks)
        "task": "core.tasks.purge_audit_task",
        "schedule": 3600.0,
    },
}

# --- mail (budget and idle warnings to tenant admins: quotas.notify) ---------------------------
PORTAL_NAME = env_str("PORTAL_NAME", "LLM Serving Portal")
# The console backend prints each message to the worker's log (the demo); production sets SMTP.
EMAIL_BACKEND = env_str("EMAIL_BACKEND", "django.core.mail.backends.console.EmailBackend")
EMAIL_HOST = env_str("EMAIL_HOST", "localhost")
EMAIL_PORT = env_int("EMAIL_PORT", 25, minimum=1, maximum=65535)
EMAIL_HOST_USER = env_str("EMAIL_HOST_USER", "")
EMAIL_HOST_PASSWORD = env_str("EMAIL_HOST_PASSWORD", "")
EMAIL_USE_TLS = env_bool("EMAIL_USE_TLS", False)
DEFAULT_FROM_EMAIL = env_str("DEFAULT_FROM_EMAIL", "llm-portal@localhost")

# --- runtime -----------------------------------------------------------------------------------
# The backends offered, from those registered (runtime.backends: the one list); the first is the default.
RUNTIME_BACKENDS = env_list("RUNTIME_BACKENDS", _registered_backends())
if _unknown := sorted(set(RUNTIME_BACKENDS) - set(_registered_backends())):
    raise ImproperlyConfigured(
        f"RUNTIME_BACKENDS names {', '.join(_unknown)}: not a backend (known: {', '.join(_registered_backends())})"
    )
RUNTIME_DEFAULT_BACKEND = env_choice("RUNTIME_DEFAULT_BACKEND", RUNTIME_BACKENDS[0], set(RUNTIME_BACKENDS))
# How KServe runs a kserve deployment (runtime/manifests/kserve.py; docs/install.md, "KServe"):
# "Standard" (KServe's default: a Deployment and a Service, no Knative) or "Knative" (Knative
# Serving revisions: concurrency autoscaling and scale to zero; not behind a Gateway).
KSERVE_DEPLOYMENT_MODE = env_choice("KSERVE_DEPLOYMENT_MODE", "Standard", {"Standard", "Knative"})
KUBERNETES_URL = env_url("KUBERNETES_URL", None, schemes={"http", "https"})
KUBECONFIG = env_str("KUBECONFIG")
KUBERNETES_TIMEOUT_SECONDS = env_float("KUBERNETES_TIMEOUT_SECONDS", 10.0, minimum=0.1)
KUEUE_COHORT = env_str("KUEUE_COHORT", "llm-serving")
# The CPU-only ResourceFlavor every tenant's ClusterQueue lists first, for Ray heads, and the
# node labels of the CPU nodes heads should run on ("key=value,key=value"; empty = any
# untainted node). docs/scheduling.md, "Flavors and queues".
KUEUE_CPU_FLAVOR = env_str("KUEUE_CPU_FLAVOR", "portal-cpu")
KUEUE_CPU_NODE_LABELS: dict[str, str] = {}
for _item in env_list("KUEUE_CPU_NODE_LABELS", []):
    _key, _sep, _value = _item.partition("=")
    if not _sep or not _key.strip():
        raise ImproperlyConfigured(f"KUEUE_CPU_NODE_LABELS: {_item!r} is not key=value")
    KUEUE_CPU_NODE_LABELS[_key.strip()] = _value.strip()
# Every tenant ClusterQueue's queueing strategy (docs/scheduling.md, "Karpenter node pools and
# topology"): BestEffortFIFO lets a smaller deployment that fits pass a larger one that waits;
# StrictFIFO admits in order.
KUEUE_QUEUEING_STRATEGY = env_choice("KUEUE_QUEUEING_STRATEGY", "BestEffortFIFO", {"BestEffortFIFO", "StrictFIFO"})
# Every tenant ClusterQueue's preemption (docs/scheduling.md, "Preemption"; runtime/preemption.py has
# the values Kueue accepts and what each implies, as the Cluster page shows them): whether a tenant
# takes its nominal quota back from borrowers in the cohort, and whether a deployment may evict
# another of its tenant's queue.
KUEUE_RECLAIM_WITHIN_COHORT = env_choice("KUEUE_RECLAIM_WITHIN_COHORT", "Any", set(_preemption.RECLAIM_WITHIN_COHORT))
KUEUE_WITHIN_CLUSTER_QUEUE = env_choice(
    "KUEUE_WITHIN_CLUSTER_QUEUE", "LowerPriority", set(_preemption.WITHIN_CLUSTER_QUEUE)
)
# Karpenter NodePools for flavors with provisioning settings (quotas.nodepools). On "aws" each
# pool gets an EC2NodeClass from the KARPENTER_NODE_ROLE / *_TAGS / AMI settings; elsewhere the
# pools name the node class KARPENTER_NODE_CLASS_GROUP / _KIND / _NAME (a flavor may name its own).
KARPENTER_PLATFORM = env_str("KARPENTER_PLATFORM", "aws")
KARPENTER_NODE_CLASS_GROUP = env_str("KARPENTER_NODE_CLASS_GROUP", "karpenter.k8s.aws")
KARPENTER_NODE_CLASS_KIND = env_str("KARPENTER_NODE_CLASS_KIND", "EC2NodeClass")
KARPENTER_NODE_CLASS_NAME = env_str("KARPENTER_NODE_CLASS_NAME", "")
KARPENTER_NODE_ROLE = env_str("KARPENTER_NODE_ROLE", "")
# A pinned AMI release (e.g. al2023@v20240807): "@latest" replaces every GPU node on each AMI
# release, so it needs KARPENTER_AMI_ALLOW_LATEST (portal.E002 checks both at start).
KARPENTER_AMI_ALIAS = env_str("KARPENTER_AMI_ALIAS", "")
KARPENTER_AMI_ALLOW_LATEST = env_bool("KARPENTER_AMI_ALLOW_LATEST", False)
KARPENTER_ROOT_VOLUME_GIB = env_int("KARPENTER_ROOT_VOLUME_GIB", 200, minimum=20)


def _tags(name: str, items: list[str]) -> dict[str, str]:
    tags = {}
    for item in items:
        key, sep, value = item.partition("=")
        if not sep or not key.strip() or not value.strip():
            raise ImproperlyConfigured(f"{name}: {item!r} is not key=value")
        tags[key.strip()] = value.strip()
    return tags


KARPENTER_SUBNET_TAGS = _tags("KARPENTER_SUBNET_TAGS", env_list("KARPENTER_SUBNET_TAGS", []))
KARPENTER_SECURITY_GROUP_TAGS = _tags("KARPENTER_SECURITY_GROUP_TAGS", env_list("KARPENTER_SECURITY_GROUP_TAGS", []))
RAY_VERSION = env_str("RAY_VERSION", "2.60.0")
RAY_IMAGE = env_str("RAY_IMAGE", "rayproject/ray-llm:2.60.0-py311-cu128")
VLLM_IMAGE = env_str("VLLM_IMAGE", "vllm/vllm-openai:v0.32.0")
MODEL_CACHE_PVC = env_str("MODEL_CACHE_PVC", "model-cache")
# The claim the portal creates in each tenant namespace (quotas.model_cache; a tenant may override
# both): its size in GiB, only ever grown, and its StorageClass ("": the cluster's default class).
MODEL_CACHE_SIZE_GI = env_int("MODEL_CACHE_SIZE_GI", 200, minimum=1, maximum=2**20)
MODEL_CACHE_STORAGE_CLASS = env_str("MODEL_CACHE_STORAGE_CLASS", "")
HF_CACHE_PATH = env_str("HF_CACHE_PATH", "/home/ray/.cache/huggingface")
NCCL_DEBUG = env_choice("NCCL_DEBUG", "WARN", {"VERSION", "WARN", "INFO", "TRACE"})
PROMETHEUS_URL = env_url("PROMETHEUS_URL", None, schemes={"http", "https"})
# How often that Prometheus scrapes the engines (their ServiceMonitor/PodMonitor `interval`; the
# prometheus-operator's default, CommonPrometheusFields.ScrapeInterval in
# pkg/apis/monitoring/v1/prometheus_types.go, is 30s). The rate window follows from it and the
# cycle (runtime.exposition.window.rate_window; metrics.collect.rate_window_s).
PROMETHEUS_SCRAPE_INTERVAL_SECONDS = env_float("PROMETHEUS_SCRAPE_INTERVAL_SECONDS", 30.0, minimum=1.0)
# The cluster readiness page: where Kueue keeps its configuration, and whether the Gateway API's
# CRDs are required (portal/readiness.py).
KUEUE_CONFIG_NAMESPACE = env_str("KUEUE_CONFIG_NAMESPACE", "kueue-system")
KUEUE_CONFIG_MAP = env_str("KUEUE_CONFIG_MAP", "kueue-manager-config")
GATEWAY_API = env_bool("GATEWAY_API", False)
# Endpoint access (access app; docs/install.md, step 8 "Endpoint access"): each kuberay/kserve deployment gets an
# HTTPRoute on this platform Gateway and Kuadrant policies; its URL shown is
# GATEWAY_PUBLIC_URL/<tenant>/<deployment>/v1. Unset GATEWAY_PUBLIC_URL: no route, the
# cluster-internal URL as before. API-key Secrets live in API_KEY_NAMESPACE (Kuadrant's own
# namespace, where the AuthConfigs it generates look for them).
GATEWAY_NAME = env_str("GATEWAY_NAME", "llm-gateway")
GATEWAY_NAMESPACE = env_str("GATEWAY_NAMESPACE", "gateway-system")
GATEWAY_PUBLIC_URL = env_url("GATEWAY_PUBLIC_URL", None, schemes={"http", "https"})
# The portal's own Service: a tenant endpoint's `/v1/models` is routed to it (access.tenant_endpoint).
# Unset: tenant endpoints route models only, and `/v1/models` is not served on the Gateway.
PORTAL_SERVICE_NAME = env_str("PORTAL_SERVICE_NAME", "")
PORTAL_SERVICE_NAMESPACE = env_str("PORTAL_SERVICE_NAMESPACE", "")
PORTAL_SERVICE_PORT = env_int("PORTAL_SERVICE_PORT", 80, minimum=1)
API_KEY_NAMESPACE = env_str("API_KEY_NAMESPACE", "kuadrant-system")
if GATEWAY_PUBLIC_URL and KSERVE_DEPLOYMENT_MODE == "Knative" and "kserve" in RUNTIME_BACKENDS:
    # runtime.manifests.kserve.predictor_service: no stable Service for a route (docs/install.md, "KServe").
    raise ImproperlyConfigured(
        "KSERVE_DEPLOYMENT_MODE=Knative cannot be used with GATEWAY_PUBLIC_URL: a Knative-mode predictor has no "
        "Service a Gateway route can target. Use KSERVE_DEPLOYMENT_MODE=Standard, or drop kserve from RUNTIME_BACKENDS."
    )
METRICS_SCRAPE_TIMEOUT_SECONDS = env_float("METRICS_SCRAPE_TIMEOUT_SECONDS", 5.0, minimum=0.1)
# Deployments per scrape task: a cycle over more is spread over the worker processes.
METRICS_SHARD_SIZE = env_int("METRICS_SHARD_SIZE", 100, minimum=1)
METRICS_TOKEN = env_str("METRICS_TOKEN")  # bearer token for the portal's own /metrics; unset = off
LOCAL_RUNTIME_DIR = Path(env_str("LOCAL_RUNTIME_DIR", str(VAR_DIR / "local-runtime")))

# LOG_FORMAT=json: one JSON object per line (core.jsonlog), audit rows included, for a SIEM.
LOGGING = logging_config(
    level=env_choice("LOG_LEVEL", "INFO", {"DEBUG", "INFO", "WARNING", "ERROR"}),
    fmt=env_choice("LOG_FORMAT", "plain", LOG_FORMATS),
)
# Audit rows older than this are deleted by core.tasks.purge_audit_task, daily; 0 keeps them all.
AUDIT_RETENTION_DAYS = env_int("AUDIT_RETENTION_DAYS", 400, minimum=0, maximum=36500)

# knox's own migration creates its default token table even though ApiToken replaces it; that
# orphan table references auth_user and breaks TRUNCATE in tests. Our model is the only one.
MIGRATION_MODULES = {"knox": None}

# While a deployment is queued/provisioning the reconciler checks back this often (besides the sweep).
RECONCILE_REQUEUE_SECONDS = env_float("RECONCILE_REQUEUE_SECONDS", 10.0, minimum=0.1)
# ...backing off to at most this while nothing changes (a quarter of the time since the last change).
RECONCILE_REQUEUE_MAX_SECONDS = env_float("RECONCILE_REQUEUE_MAX_SECONDS", 120.0, minimum=0.1)

# --- local backend (runtime/backends/local/): the engine runs on this machine with vLLM's CPU build -----
# "vllm": one `vllm.entrypoints.openai.api_server` process (default: measured 2.6x faster cold
# start and ~3x less memory on a 2-core box); "ray": the same Ray Serve LLM app as on KubeRay.
# The README's switch `LOCAL_ENGINE=1` reaches the portal too (scripts/demo, a shell that exported
# it): "1"/"0" name no engine, so they mean the default one instead of stopping start-up.
LOCAL_ENGINE = {"1": "vllm", "0": "vllm"}.get(env_str("LOCAL_ENGINE", None) or "", None) or env_choice(
    "LOCAL_ENGINE", "vllm", {"vllm", "ray"}
)
# The interpreter that runs the engine (a venv with the [local] extra); default: this one.
LOCAL_ENGINE_PYTHON = env_str("LOCAL_ENGINE_PYTHON", None)
LOCAL_KVCACHE_GIB = env_int("LOCAL_KVCACHE_GIB", 1, minimum=1)  # VLLM_CPU_KVCACHE_SPACE
LOCAL_ENGINE_THREADS = env_int("LOCAL_ENGINE_THREADS", 2, minimum=1)  # OMP threads per engine
LOCAL_STOP_TIMEOUT_SECONDS = env_float("LOCAL_STOP_TIMEOUT_SECONDS", 20.0, minimum=0.1)
# The local gateway (runtime.gateway_local) in front of the engines: keys checked there, one port per
# tenant routing by `model`, shared models under their limits, usage per key (issue 34). Off by
# default: the demo's engines answer on their own ports; tests/e2e/test_shared_models_local.py
# runs it on the engine.
LOCAL_GATEWAY = env_bool("LOCAL_GATEWAY", default=False)
# The portal's base URL as the local gateway reaches it (e.g. http://127.0.0.1:8000): with it, a
# deployment the idle policy or serving schedule stopped keeps its ports, and a request wakes it
# (issue 35, deployments.wake); unset, such a request finds nothing listening.
LOCAL_GATEWAY_PORTAL_URL = env_url("LOCAL_GATEWAY_PORTAL_URL", None, schemes={"http", "https"})
# How often a starting local engine is checked (one loopback request): the delay between the
# engine serving and the portal showing Ready (bench/b8_startup.py).
LOCAL_STARTUP_POLL_SECONDS = env_float("LOCAL_STARTUP_POLL_SECONDS", 1.0, minimum=0.1)
# A local deployment's model_source must resolve (symlinks included) to a directory under this one;
# `manage.py make_tiny_model` and demo_local put the demo's tiny model in VAR_DIR/models/tiny-llama.
LOCAL_MODEL_ROOT = Path(env_str("LOCAL_MODEL_ROOT", str(VAR_DIR / "models")))
if not LOCAL_MODEL_ROOT.is_absolute():
    raise ImproperlyConfigured(f"LOCAL_MODEL_ROOT={LOCAL_MODEL_ROOT} must be an absolute path")

# The catalog's "Import facts" for s3:// sources (runtime.modelfacts_s3): the portal lists the
# prefix and reads config.json and the like and the safetensors headers (ranged GETs), never the
# weights. Unset endpoint: s3:// sources are not read (for AWS itself: https://s3.<region>.amazonaws.com).
# The credentials are the standard AWS_* names; without an access key, boto3's own chain (a web
# identity token, an instance profile) signs in.
MODEL_IMPORT_S3_ENDPOINT_URL = env_url("MODEL_IMPORT_S3_ENDPOINT_URL", None, schemes={"http", "https"})
MODEL_IMPORT_S3_REGION = env_str("AWS_REGION") or env_str("AWS_DEFAULT_REGION", "us-east-1")
MODEL_IMPORT_S3_ACCESS_KEY_ID = env_str("AWS_ACCESS_KEY_ID")
MODEL_IMPORT_S3_SECRET_ACCESS_KEY = env_str("AWS_SECRET_ACCESS_KEY")
MODEL_IMPORT_S3_SESSION_TOKEN = env_str("AWS_SESSION_TOKEN")
if bool(MODEL_IMPORT_S3_ACCESS_KEY_ID) != bool(MODEL_IMPORT_S3_SECRET_ACCESS_KEY):
    raise ImproperlyConfigured("AWS_ACCESS_KEY_ID and AWS_SECRET_ACCESS_KEY are set together or not at all")
# Per request (connect, then read), and for the whole import: below gunicorn's 60 s worker timeout.
MODEL_IMPORT_S3_TIMEOUT_SECONDS = env_float("MODEL_IMPORT_S3_TIMEOUT_SECONDS", 5.0, minimum=0.1)
MODEL_IMPORT_S3_DEADLINE_SECONDS = env_float("MODEL_IMPORT_S3_DEADLINE_SECONDS", 30.0, minimum=1.0)
