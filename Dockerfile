# jarvis-agents: one image for the API (gunicorn), the workers and the migrations.
#   docker build -t jarvis-agents .
#   docker run --rm -p 8000:8000 -e DATABASE_URL=… -e REDIS_URL=… -e OLLAMA_HOST=… jarvis-agents

FROM python:3.11-slim AS build
WORKDIR /src
COPY pyproject.toml README.md ./
COPY jarvis_agents ./jarvis_agents
COPY workers ./workers
COPY api ./api
RUN pip wheel --no-cache-dir --no-deps --wheel-dir /wheels .

FROM python:3.11-slim
ENV PYTHONDONTWRITEBYTECODE=1 \
    PYTHONUNBUFFERED=1 \
    PIP_NO_CACHE_DIR=1 \
    PIP_DISABLE_PIP_VERSION_CHECK=1
COPY --from=build /wheels /wheels
RUN pip install /wheels/*.whl && rm -rf /wheels \
    && useradd --create-home --uid 10001 --shell /usr/sbin/nologin jarvis
USER jarvis
WORKDIR /home/jarvis
ENV JARVIS_DATA_DIR=/home/jarvis/data \
    PORT=8000
EXPOSE 8000
CMD ["gunicorn", "-c", "python:api.gunicorn_conf", "api.wsgi:app"]
