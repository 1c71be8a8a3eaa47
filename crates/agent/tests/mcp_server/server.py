"""A small MCP server for Trellis's MCP client tests, built on the official Python SDK (`mcp`, pinned
in xtask/src/install.rs).

    python server.py --name crm [--transport stdio|http] [--port N] [--started-file PATH] [--dynamic]
                     [--identity] [--env-tool] [--calls-file PATH]

Tools: search_calls and get_transcript (plain answers naming the server, so a test can tell which
server answered; annotated read-only and idempotent), accounts.lookup (a dotted name, for name sanitizing), fail (an isError result),
slow (sleeps, for timeouts) and crash (the process exits mid-call).

--dynamic: also offer add_tool and remove_tool, which change the tool list while the server runs
and send notifications/tools/list_changed. An added tool answers with its own name and argument.

--env-tool: also offer env_names, which answers with the names of the server's environment variables
--identity: also offer whoami, which answers with the user id the client sent (the
TRELLIS_MCP_USER_ID environment variable over stdio, the x-trellis-user-id header over HTTP) and
the server's process id.

--calls-file: every search_calls call appends a line to the file, and the server also offers
lookup_slowly (read-only), which appends a line too and sleeps 60 s on its first call only, so a
test can kill its client in the middle of it and count the calls of every process.

--started-file: the file is written when the process starts, so a test can see whether (and how
often) a server was started. Its content is the process id.
"""

import argparse
import asyncio
import os

from mcp.server.mcpserver import Context, MCPServer
from mcp.server.mcpserver.exceptions import ToolError
from mcp.shared.exceptions import MCPError
from mcp.types import ToolAnnotations


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--name", default="crm")
    parser.add_argument("--transport", choices=["stdio", "http"], default="stdio")
    parser.add_argument("--port", type=int, default=0)
    parser.add_argument("--started-file")
    parser.add_argument("--dynamic", action="store_true")
    parser.add_argument("--identity", action="store_true")
    parser.add_argument("--env-tool", action="store_true")
    parser.add_argument("--calls-file")
    args = parser.parse_args()

    if args.started_file:
        with open(args.started_file, "a", encoding="utf-8") as f:
            f.write(f"{os.getpid()}\n")

    server = MCPServer(args.name, log_level="WARNING")
    name = args.name

    def count_call(tool: str) -> int:
        """Append `tool` to --calls-file (when given); how many calls of it the file holds."""
        if not args.calls_file:
            return 0
        with open(args.calls_file, "a+", encoding="utf-8") as f:
            f.write(tool + "\n")
            f.seek(0)
            return sum(1 for line in f if line.strip() == tool)

    @server.tool(
        description="Search recorded sales calls by account name. Returns call ids and titles.",
        annotations=ToolAnnotations(readOnlyHint=True),
    )
    def search_calls(account: str, limit: int = 5) -> str:
        count_call("search_calls")
        calls = [f"call-{i}: {account} call {i}" for i in range(1, min(limit, 3) + 1)]
        return f"[{name}] " + "; ".join(calls)

    @server.tool(
        description="The transcript of one call, by call id.",
        annotations=ToolAnnotations(readOnlyHint=False, idempotentHint=True),
    )
    def get_transcript(call_id: str) -> str:
        return f"[{name}] Transcript of {call_id}: the customer asked about pricing."

    @server.tool(name="accounts.lookup", description="Look up an account by its exact name.")
    def accounts_lookup(account: str) -> str:
        return f"[{name}] {account}: 120 seats, renewal in March."

    @server.tool(description="Always fails (for tests).")
    def fail(reason: str = "no reason") -> str:
        raise ToolError(f"the CRM refused: {reason}")

    if args.calls_file:

        @server.tool(
            description="Looks an account up, slowly the first time (for tests).",
            annotations=ToolAnnotations(readOnlyHint=True),
        )
        async def lookup_slowly(account: str) -> str:
            first = count_call("lookup_slowly") == 1
            if first:
                await asyncio.sleep(60)
            return f"[{name}] {account} looked up"

    @server.tool(description="Sleeps, then answers (for tests).")
    async def slow(seconds: float) -> str:
        await asyncio.sleep(seconds)
        return f"[{name}] slept {seconds}s"

    @server.tool(description="Answers with a JSON-RPC error instead of a result (for tests).")
    def protocol_error() -> str:
        raise MCPError(code=-32603, message="the CRM backend is misconfigured")

    @server.tool(description="Exits the server process in the middle of the call (for tests).")
    def crash() -> str:
        os._exit(3)

    if args.dynamic:

        @server.tool(description="Adds a tool named `tool` to this server (for tests).")
        async def add_tool(tool: str, ctx: Context) -> str:
            def added(text: str) -> str:
                return f"[{name}] {tool} says {text}"

            server.add_tool(added, name=tool, description=f"A tool added at run time: {tool}.")
            await ctx.session.send_tool_list_changed()
            return f"[{name}] added {tool}"

        @server.tool(description="Removes the tool named `tool` from this server (for tests).")
        async def remove_tool(tool: str, ctx: Context) -> str:
            server.remove_tool(tool)
            await ctx.session.send_tool_list_changed()
            return f"[{name}] removed {tool}"

    if args.env_tool:

        @server.tool(description="The names of this server's environment variables (for tests).")
        def env_names() -> str:
            return ",".join(sorted(os.environ))

    if args.identity:

        @server.tool(description="Who the client says the user is (for tests).")
        def whoami(ctx: Context) -> str:
            headers = ctx.headers or {}
            user = headers.get("x-trellis-user-id") or os.environ.get("TRELLIS_MCP_USER_ID") or "nobody"
            return f"[{name}] user={user} pid={os.getpid()}"

    if args.transport == "stdio":
        server.run("stdio")
    else:
        server.run("streamable-http", host="127.0.0.1", port=args.port)


if __name__ == "__main__":
    main()
