#!/usr/bin/python3
"""A scripted WebSocket server (python3-websockets) for the core.ws specs.

Each connection's path picks what it does:
  /echo           answers every message with "echo:" + message; "close:CODE" closes with CODE
  /fragments      sends one 300,000-byte text message in 3 fragments, then echoes
  /silent         reads and says nothing
  /reject         refuses the upgrade (HTTP 403)
With `--tls CERT KEY` it serves wss:// instead; with `--watch PID` it exits once PID is gone. Prints "READY <port>" when listening; after every closed connection it prints
"CLOSED <path> <code>" (the close code it received, 1006 when there was no close frame).
"""
import argparse
import asyncio
import ssl

import websockets

import watched  # tests/support/watched.py: --watch PID


async def handler(ws, path=None):
    path = path or ws.path
    try:
        if path == "/fragments":
            await ws.send(["a" * 100000, "b" * 100000, "c" * 100000])
        async for m in ws:
            if path == "/silent":
                continue
            if isinstance(m, str) and m.startswith("close:"):
                await ws.close(int(m[6:]), "asked")
                break
            await ws.send("echo:" + m)
    except websockets.ConnectionClosed:
        pass
    finally:
        print("CLOSED %s %s" % (path, ws.close_code), flush=True)


async def reject(path, headers):
    if path == "/reject":
        return (403, [], b"forbidden\n")
    return None


async def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--tls", nargs=2, metavar=("CERT", "KEY"))
    watched.add_argument(ap)
    args = ap.parse_args()
    watched.end_with(args.watch)
    ctx = None
    if args.tls:
        ctx = ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER)
        ctx.load_cert_chain(*args.tls)
    async with websockets.serve(handler, "127.0.0.1", 0, process_request=reject,
                                max_size=2 ** 24, ssl=ctx) as srv:
        print("READY %d" % srv.sockets[0].getsockname()[1], flush=True)
        await asyncio.Future()


asyncio.run(main())
