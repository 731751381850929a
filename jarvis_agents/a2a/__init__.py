"""A2A 1.0 (README, A2A): our agents as the protocol's tasks, with the `a2a-sdk` types.

A task is an agent and a context is a thread. `tasks` maps an agent (and its steps) to
the SDK's Task and stream events; `card` builds the agent cards; `service` holds the use
cases the JSON-RPC door (api/a2a.py) calls. Nothing here knows HTTP.
"""
