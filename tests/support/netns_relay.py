#!/usr/bin/env python3
"""A TCP relay from this host's loopback into a network namespace a spec made.

    netns_relay.py NETNS_PATH PORT

Listens on 127.0.0.1 (an ephemeral port, printed on stdout) in the namespace it starts in,
then joins NETNS_PATH (setns) and relays each connection to 127.0.0.1:PORT there. A spec uses
it to talk to a server it runs inside its own namespace (tests/e2e/walls_net_spec.lua)."""
import ctypes
import os
import socket
import sys
import threading

CLONE_NEWNET = 0x40000000


def pipe(src, dst):
    try:
        while True:
            data = src.recv(65536)
            if not data:
                break
            dst.sendall(data)
    except OSError:
        pass
    for s in (src, dst):
        try:
            s.shutdown(socket.SHUT_RDWR)
        except OSError:
            pass


def main():
    path, port = sys.argv[1], int(sys.argv[2])
    listener = socket.socket()
    listener.bind(("127.0.0.1", 0))
    listener.listen(64)
    fd = os.open(path, os.O_RDONLY)
    if ctypes.CDLL(None, use_errno=True).setns(fd, CLONE_NEWNET) != 0:
        sys.exit("setns: " + os.strerror(ctypes.get_errno()))
    os.close(fd)
    print(listener.getsockname()[1], flush=True)
    while True:
        client, _ = listener.accept()
        upstream = socket.create_connection(("127.0.0.1", port))
        for a, b in ((client, upstream), (upstream, client)):
            threading.Thread(target=pipe, args=(a, b), daemon=True).start()


if __name__ == "__main__":
    main()
