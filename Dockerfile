# The Ringmaster operator image: `ringmaster run` as a non-root user on a slim Python 3.11 base.
#   docker build -t ringmaster:0.1.0 .          (the tag is the chart's appVersion)
# Dependencies come from pyproject.toml's [project.dependencies] only: no test or plot extras.
# pip uses whatever index it is configured with (pip.conf / PIP_INDEX_URL as build secrets or
# args); none is written here.

FROM python:3.11-slim-bookworm AS build
ENV PIP_DISABLE_PIP_VERSION_CHECK=1 PIP_NO_CACHE_DIR=1
WORKDIR /src
# Only what the package build needs (.dockerignore keeps the rest out of the context).
COPY pyproject.toml README.md ./
COPY operator ./operator
# Wheels of the package and its runtime dependencies, so the final stage needs no build tools
# and no network.
RUN pip wheel --wheel-dir /wheels .

FROM python:3.11-slim-bookworm
# One BLAS thread: the engine's batched solves are small, and OpenBLAS's threads would spin on
# the operator's CPU request.
ENV PYTHONUNBUFFERED=1 \
    PYTHONDONTWRITEBYTECODE=1 \
    OPENBLAS_NUM_THREADS=1 \
    OMP_NUM_THREADS=1 \
    PIP_DISABLE_PIP_VERSION_CHECK=1 \
    PIP_NO_CACHE_DIR=1
RUN --mount=type=bind,from=build,source=/wheels,target=/wheels \
    pip install --no-index --find-links /wheels ringmaster \
    && groupadd --gid 10001 ringmaster \
    && useradd --uid 10001 --gid 10001 --no-create-home --home-dir /nonexistent \
       --shell /usr/sbin/nologin ringmaster
# Numeric, so the kubelet can check runAsNonRoot without reading /etc/passwd.
USER 10001:10001
WORKDIR /tmp
# metrics, kopf liveness (the chart's defaults)
EXPOSE 8080 8081
ENTRYPOINT ["ringmaster"]
CMD ["run", "--liveness=http://0.0.0.0:8081/healthz"]
