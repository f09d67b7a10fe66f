# syntax=docker/dockerfile:1
# The envfactory runtime image: the package and its server extra, installed from a wheelhouse made on
# the host (`envfactory image runtime` runs `pip wheel .[server] -w build/wheelhouse` first), so the
# build itself needs no network.  Environment images (`envfactory image build`) add env_images/<Name>/
# under /catalog as a thin layer on top of this one.
#
#   docker build --build-arg BASE_IMAGE=envfactory/base:bookworm -t envfactory/runtime:0.1.0 .
#
# BASE_IMAGE: any Debian-like image with python3.11 and the venv module: the official slim image, or
# the debootstrap base of `envfactory image base` on hosts that reach no registry.
ARG BASE_IMAGE=python:3.11-slim

FROM ${BASE_IMAGE} AS build
COPY build/wheelhouse /wheels
# The wheel bundles the shipped catalog: dropped here, an image serves only what is under /catalog.
RUN python3 -m venv /opt/venv \
 && /opt/venv/bin/pip install --no-index --find-links /wheels --no-cache-dir --disable-pip-version-check \
        "gym-envfactory[server]" \
 && /opt/venv/bin/pip uninstall -y --disable-pip-version-check setuptools pip \
 && rm -rf /opt/venv/lib/python3*/site-packages/gym_envfactory/_catalog

FROM ${BASE_IMAGE}
# Few instructions on purpose: each one is a layer commit for the classic builder.
ARG ENVFACTORY_UID=10001
ARG ENVFACTORY_SOURCE_HASH=unknown
ARG ENVFACTORY_VERSION=unknown
RUN (getent group envfactory || groupadd --system --gid ${ENVFACTORY_UID} envfactory) \
 && (getent passwd envfactory || useradd --system --uid ${ENVFACTORY_UID} --gid ${ENVFACTORY_UID} \
        --home-dir /nonexistent --no-create-home --shell /usr/sbin/nologin envfactory) \
 && mkdir -p /catalog /srv/envfactory
COPY --from=build /opt/venv /opt/venv
# PYTHONMALLOC=malloc: the server's memory returns after its sessions close (pymalloc's arenas fragment;
# docs/performance.md, "Memory returns after close")
ENV PATH=/opt/venv/bin:$PATH \
    PYTHONUNBUFFERED=1 \
    PYTHONDONTWRITEBYTECODE=1 \
    PYTHONMALLOC=malloc \
    HOME=/tmp \
    ENVFACTORY_CATALOG=/catalog
LABEL org.opencontainers.image.title="envfactory runtime" \
      org.opencontainers.image.version="${ENVFACTORY_VERSION}" \
      org.envfactory.kind="runtime" \
      org.envfactory.version="${ENVFACTORY_VERSION}" \
      org.envfactory.source-hash="${ENVFACTORY_SOURCE_HASH}"
WORKDIR /srv/envfactory
USER 10001:10001
EXPOSE 8765
# /healthz needs no token; python's urllib keeps the image free of curl.  Engine semantics: a failed probe
# in the first 120 s (start period) does not count, the first success makes the container healthy; after
# that, 3 failures in a row (each probe may take 10 s: a busy machine starts python slowly) make it
# unhealthy, and a later success healthy again.
HEALTHCHECK --interval=5s --timeout=10s --start-period=120s --retries=3 \
    CMD ["python3", "-c", "import urllib.request; urllib.request.urlopen('http://127.0.0.1:8765/healthz', timeout=2)"]
# The token comes from ENVFACTORY_TOKEN: the server refuses to listen on 0.0.0.0 without one.
# CMD selects what to serve: every environment under /catalog by default, or names.  SIGTERM (the
# default stop signal) shuts uvicorn down cleanly.
ENTRYPOINT ["envfactory", "serve", "--host", "0.0.0.0", "--port", "8765"]
CMD ["--all"]
