# towline worker image.
#
# Build stage: `pip wheel .` turns the towline/{workflows,activities,capabilities} symlinks
# into real files, so the sources of all three roles must be in the build context.
# Runtime stage: installs that wheel (and its dependencies) and the example agents.
FROM python:3.11-slim AS build
ENV PIP_NO_CACHE_DIR=1 PIP_DISABLE_PIP_VERSION_CHECK=1
WORKDIR /src
# pyproject.toml names README.md as the package's readme (its long description on PyPI).
COPY pyproject.toml README.md ./
COPY towline/ towline/
COPY workflows/ workflows/
COPY activities/ activities/
COPY capabilities/ capabilities/
RUN pip wheel --no-deps --wheel-dir /wheels .

FROM python:3.11-slim
ENV PIP_NO_CACHE_DIR=1 \
    PIP_DISABLE_PIP_VERSION_CHECK=1 \
    PYTHONDONTWRITEBYTECODE=1 \
    PYTHONUNBUFFERED=1 \
    PYTHONPATH=/app
COPY --from=build /wheels /wheels
RUN pip install /wheels/*.whl && rm -rf /wheels \
    && useradd --create-home --uid 10001 towline
WORKDIR /app
# Agents are loaded by import path (`--agent examples.calculator:agent`); PYTHONPATH=/app.
COPY examples/ examples/
USER towline
# Address, namespace and TLS come from Temporal's environment configuration
# (TEMPORAL_ADDRESS, TEMPORAL_NAMESPACE, ...). Pass the agents as arguments:
#   docker run towline --agent examples.calculator:agent
ENTRYPOINT ["towline", "worker"]
