#!/usr/bin/env python3
"""A small MCP server over stdio (newline-delimited JSON-RPC 2.0 on stdin/stdout), for specs.

It checks what a client must do: `initialize` first (anything else before it is an error
-32002), then `notifications/initialized`, before `tools/list` or `tools/call`. Its tools:
  echo {text}      → a text block "echo: TEXT", plus the process's uid and the value of the
                     MCP_DEMO_GREETING environment variable (from the policy's env)
  fail {}          → isError true, "it failed on purpose"
tools/list is paged: one tool a page (nextCursor), so a client must follow the cursor.
    mcp_stdio_server.py [--crash]   --crash: write to stderr and exit 3 before reading anything
"""
import json
import os
import sys

TOOLS = [
    {"name": "echo", "description": "Echo the text back.",
     "inputSchema": {"type": "object", "properties": {"text": {"type": "string"}}, "required": ["text"]}},
    {"name": "fail", "description": "Always fails.", "inputSchema": {"type": "object", "properties": {}}},
]


def send(msg):
    sys.stdout.write(json.dumps(msg) + "\n")
    sys.stdout.flush()


def main():
    if "--crash" in sys.argv:
        sys.stderr.write("demo server: cannot open its database\n")
        sys.exit(3)
    initialized = False
    ready = False
    for line in sys.stdin:
        msg = json.loads(line)
        mid, method = msg.get("id"), msg.get("method")
        if method == "notifications/initialized":
            ready = initialized
            continue
        if mid is None:
            continue
        if method == "initialize":
            initialized = True
            send({"jsonrpc": "2.0", "id": mid, "result": {
                "protocolVersion": msg["params"]["protocolVersion"],
                "capabilities": {"tools": {}}, "serverInfo": {"name": "demo", "version": "1"}}})
        elif not ready:
            send({"jsonrpc": "2.0", "id": mid, "error": {"code": -32002, "message": "not initialized"}})
        elif method == "tools/list":
            cursor = int((msg.get("params") or {}).get("cursor") or 0)
            result = {"tools": [TOOLS[cursor]]}
            if cursor + 1 < len(TOOLS):
                result["nextCursor"] = str(cursor + 1)
            send({"jsonrpc": "2.0", "id": mid, "result": result})
        elif method == "tools/call":
            name, args = msg["params"]["name"], msg["params"].get("arguments") or {}
            if name == "echo":
                text = "echo: %s (uid %d, greeting %s)" % (args.get("text"), os.getuid(),
                                                            os.environ.get("MCP_DEMO_GREETING"))
                send({"jsonrpc": "2.0", "id": mid, "result": {"content": [{"type": "text", "text": text}]}})
            else:
                send({"jsonrpc": "2.0", "id": mid, "result": {
                    "content": [{"type": "text", "text": "it failed on purpose"}], "isError": True}})
        else:
            send({"jsonrpc": "2.0", "id": mid, "error": {"code": -32601, "message": "no method " + method}})


main()
