"""MCP servers' tools as agent tools: the config, the client, and what workers publish.

Modules: `config` (the JARVIS_MCP_CONFIG file), `loop` (the one event-loop thread of a
process), `connection` (one server: started, kept, restarted, called), `provider` (all
servers' tools for the registry), `published` (the tools workers have, in Redis, for the
API). Only `config` is light; the others load the `mcp` SDK.
"""
