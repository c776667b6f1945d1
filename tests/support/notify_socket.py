#!/usr/bin/env python3
"""A service manager's notify socket for the specs (what systemd gives a Type=notify unit).

Binds a unix datagram socket at PATH ("@name" for the abstract namespace), and appends one
JSON line per datagram to OUT: {"pid": sender's pid from SCM_CREDENTIALS, "text": the message}.
systemd accepts READY=1 only from the unit's main process (NotifyAccess=main), so the specs
check the pid too. Writes "ready" to OUT.ready once bound; runs until killed.
"""
import json
import socket
import struct
import sys


def main():
    path, out = sys.argv[1], sys.argv[2]
    sock = socket.socket(socket.AF_UNIX, socket.SOCK_DGRAM)
    sock.setsockopt(socket.SOL_SOCKET, socket.SO_PASSCRED, 1)
    sock.bind("\0" + path[1:] if path.startswith("@") else path)
    with open(out + ".ready", "w") as f:
        f.write("ready")
    creds_size = struct.calcsize("3i")
    while True:
        data, ancdata, _, _ = sock.recvmsg(4096, socket.CMSG_SPACE(creds_size))
        pid = None
        for level, kind, payload in ancdata:
            if level == socket.SOL_SOCKET and kind == socket.SCM_CREDENTIALS:
                pid = struct.unpack("3i", payload[:creds_size])[0]
        with open(out, "a") as f:
            f.write(json.dumps({"pid": pid, "text": data.decode("utf-8", "replace")}) + "\n")


if __name__ == "__main__":
    main()
