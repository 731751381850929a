"""The WSGI entry point for gunicorn in production (see the Procfile):

    gunicorn -c python:api.gunicorn_conf api.wsgi:app

Importing this module builds the app from the environment; nothing else does.
"""

from __future__ import annotations

from api import create_app

app = create_app()
