"""The MCP server door (README, MCP server): every assistant of a user as an MCP tool.

An ASGI process of its own (`jarvis-agents mcp`): the official `mcp` SDK's Streamable
HTTP transport, the core's service layer behind it. Like `api` and `workers`, it
imports the core; the core imports none of it.
"""
