"""jarvis-agents: the domain and the engine. Knows nothing of Flask or Celery."""

__version__ = "0.1.0"
