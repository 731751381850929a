"""The outer layer: the `jarvis-agents` command and what only it uses.

These are doors into the core, not part of it: no module of `jarvis_agents` outside
this package imports it (`tests/unit/test_layers.py` checks).

- `commands`: the command group, its one-line errors, the operator commands (`up`,
  `db upgrade`, `api`, `worker`, `ping-worker`);
- `agents`: the client commands (`run`, `watch`, `list`, `show`, `steps`, `cancel`, `tools`);
- `deleting`: `delete` (an ended agent, or a thread);
- `users`: `users create | list | revoke | rotate | delete`, on the database directly;
- `client`: the API over HTTP (`JarvisClient`);
- `terminal`: how agents, steps and events look on a terminal;
- `local_stack`: `jarvis-agents up`, the whole system on one machine;
- `demo`: `jarvis-agents demo-model`, a model server to try it with.
"""

from jarvis_agents.cli.commands import main

__all__ = ["main"]
