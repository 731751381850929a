"""Could the MCP server live inside the API's gunicorn process? The numbers behind README,
MCP server ("Why a process of its own").

The SDK's Streamable HTTP transport is ASGI (asyncio); the API is WSGI on one gevent
worker. The one way in without our own event loop per request is an ASGI→WSGI bridge
that runs one asyncio loop beside the greenlets: `a2wsgi` (not a dependency):

    pip install a2wsgi && python -m bench.mcp_bridge

It serves one small SDK server (a `noop` tool, and `sleep`, which notes when it is
cancelled) twice: through a2wsgi inside `jarvis-agents api`'s gunicorn worker (beside a
`/ping` WSGI route, standing for the API's own views), and under uvicorn, as
`jarvis-agents mcp` runs. It measures a `tools/call` one at a time, how the WSGI route
answers while 100 calls wait, and whether a request the client drops cancels its call.
"""

from __future__ import annotations

import json
import os
import statistics
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

import anyio
import httpx

from bench.processes import Process, free_port

MARKER = Path(os.environ.get("MCP_BRIDGE_MARKER", tempfile.gettempdir())) / "mcp-bridge-cancelled"


def sdk_app() -> Any:
    import mcp_types as types
    from mcp.server.lowlevel import Server

    async def list_tools(ctx: Any, params: Any) -> types.ListToolsResult:
        schema = {"type": "object", "properties": {"seconds": {"type": "number"}}}
        return types.ListToolsResult(tools=[types.Tool(name=n, input_schema=schema)
                                            for n in ("noop", "sleep")])

    async def call_tool(ctx: Any, params: types.CallToolRequestParams) -> types.CallToolResult:
        if params.name == "sleep":
            try:
                await anyio.sleep(float((params.arguments or {}).get("seconds", 1)))
            except anyio.get_cancelled_exc_class():
                MARKER.write_text(str(time.time()))
                raise
        return types.CallToolResult(content=[types.TextContent(type="text", text="ok")])

    server = Server("bridge", on_list_tools=list_tools, on_call_tool=call_tool)
    return server.streamable_http_app(host="0.0.0.0")


def wsgi_app() -> Any:
    """What gunicorn loads (after gevent's patching): /mcp through the bridge, /ping plain WSGI."""
    import asyncio

    from a2wsgi import ASGIMiddleware

    asgi = sdk_app()
    bridged = ASGIMiddleware(asgi)

    async def lifespan() -> None:
        # a2wsgi runs no ASGI lifespan: the SDK's session manager must be started by hand.
        async with asgi.router.lifespan_context(asgi):
            await asyncio.Event().wait()

    asyncio.run_coroutine_threadsafe(lifespan(), bridged.loop)

    def app(environ: dict[str, Any], start_response: Any) -> Any:
        if environ["PATH_INFO"].startswith("/mcp"):
            return bridged(environ, start_response)
        start_response("200 OK", [("Content-Type", "text/plain"), ("Content-Length", "2")])
        return [b"ok"]

    return app


def serve_bridge(port: int) -> None:
    from api.server import JarvisApplication, options

    settings = {**options(f"127.0.0.1:{port}"), "jarvis_url": f"http://127.0.0.1:{port}",
                "post_worker_init": lambda worker: print("listening", flush=True),
                "worker_exit": lambda server, worker: None}
    JarvisApplication(wsgi_app, settings).run()


def serve_uvicorn(port: int) -> None:
    import uvicorn

    uvicorn.run(sdk_app(), host="127.0.0.1", port=port, log_level="warning", lifespan="on",
                log_config=None)


async def one_at_a_time(url: str, n: int) -> list[float]:
    from mcp import Client

    times = []
    async with Client(url) as client:
        for _ in range(n):
            began = time.perf_counter()
            await client.call_tool("noop", {})
            times.append(time.perf_counter() - began)
    return times


async def ping_while_calls_wait(url: str, ping_url: str, calls: int) -> list[float]:
    from mcp import Client

    pings: list[float] = []
    async with anyio.create_task_group() as group:
        for _ in range(calls):
            async def call() -> None:
                async with Client(url) as client:
                    await client.call_tool("sleep", {"seconds": 6})
            group.start_soon(call)
        await anyio.sleep(2)
        async with httpx.AsyncClient() as http:
            for _ in range(50):
                began = time.perf_counter()
                (await http.get(ping_url)).raise_for_status()
                pings.append(time.perf_counter() - began)
                await anyio.sleep(0.05)
    return pings


async def dropped_call_cancelled_after(url: str, wait_s: float = 20.0) -> float | None:
    """Seconds from a dropped request to its handler's cancellation; None: not within wait_s."""
    from mcp import Client

    MARKER.unlink(missing_ok=True)
    async with Client(url) as client:
        with anyio.move_on_after(1.0):
            await client.call_tool("sleep", {"seconds": wait_s + 10})
        dropped = time.time()
    while time.time() - dropped < wait_s:
        if MARKER.exists():
            return float(MARKER.read_text()) - dropped
        await anyio.sleep(0.05)
    return None


def measure(name: str, port: int, *, ping: bool) -> dict[str, Any]:
    url = f"http://127.0.0.1:{port}/mcp"
    calls = anyio.run(one_at_a_time, url, 200)
    figures: dict[str, Any] = {"server": name, "call_p50_ms": statistics.median(calls) * 1000,
                               "call_p99_ms": sorted(calls)[int(len(calls) * 0.99) - 1] * 1000}
    if ping:
        idle = anyio.run(ping_while_calls_wait, url, f"http://127.0.0.1:{port}/ping", 0)
        busy = anyio.run(ping_while_calls_wait, url, f"http://127.0.0.1:{port}/ping", 100)
        figures["ping_p50_ms_idle"] = statistics.median(idle) * 1000
        figures["ping_p50_ms_100_calls_waiting"] = statistics.median(busy) * 1000
        figures["ping_max_ms_100_calls_waiting"] = max(busy) * 1000
    figures["dropped_call_cancelled_after_s"] = anyio.run(dropped_call_cancelled_after, url)
    return figures


def main() -> None:
    log_dir = Path(tempfile.mkdtemp(prefix="mcp-bridge-"))
    results = []
    for name, mode in (("a2wsgi inside gunicorn+gevent", "--serve-bridge"), ("uvicorn", "--serve-uvicorn")):
        port = free_port()
        process = Process(mode[2:], [sys.executable, "-m", "bench.mcp_bridge", mode, str(port)],
                          env=dict(os.environ), log_dir=log_dir)
        try:
            deadline = time.monotonic() + 30
            while time.monotonic() < deadline:
                try:
                    httpx.get(f"http://127.0.0.1:{port}/ping", timeout=1)
                    break
                except httpx.HTTPError:
                    time.sleep(0.2)
            results.append(measure(name, port, ping=mode == "--serve-bridge"))
        finally:
            process.stop()
    print(json.dumps(results, indent=2))


if __name__ == "__main__":
    if len(sys.argv) == 3 and sys.argv[1] == "--serve-bridge":
        serve_bridge(int(sys.argv[2]))
    elif len(sys.argv) == 3 and sys.argv[1] == "--serve-uvicorn":
        serve_uvicorn(int(sys.argv[2]))
    else:
        main()
