"""gunicorn settings for production: `gunicorn -c python:api.gunicorn_conf api.wsgi:app`.

The same settings `jarvis-agents api` uses (`api.server.options`): one gevent worker
holding thousands of SSE streams, TCP_NODELAY, no worker timeout. Scale out with
more processes or machines behind a load balancer, not with more workers here.

No access log by default, as under `jarvis-agents api`: a line per request costs
the single worker CPU on every request. Turn it on without editing this file:
`gunicorn -c python:api.gunicorn_conf --access-logfile - api.wsgi:app`, or
`GUNICORN_CMD_ARGS="--access-logfile -"` (the command line wins over this file).
"""

from __future__ import annotations

import os

from api.server import options

_settings = options(f"{os.environ.get('HOST', '0.0.0.0')}:{os.environ.get('PORT', '8000')}")

bind = _settings["bind"]
worker_class = _settings["worker_class"]
workers = _settings["workers"]
worker_connections = _settings["worker_connections"]
timeout = _settings["timeout"]
graceful_timeout = _settings["graceful_timeout"]
keepalive = _settings["keepalive"]
backlog = _settings["backlog"]
limit_request_line = _settings["limit_request_line"]
accesslog = _settings["accesslog"]
errorlog = "-"
loglevel = "info"
post_worker_init = _settings["post_worker_init"]
worker_exit = _settings["worker_exit"]
control_socket_disable = _settings["control_socket_disable"]
