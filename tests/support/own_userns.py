#!/usr/bin/env python3
"""Runs COMMAND as root of a user namespace of its own, the way a Kubernetes pod with
hostUsers: false runs its containers (tests/e2e/walls_net_spec.lua runs sandboxd in it): uid
and gid 0 and the block BASE..BASE+COUNT-1 mapped to themselves, a mount namespace that user
namespace owns, and there a /dev/net/tun any uid may open (0666, as udev makes the node a pod
is given through a hostPath CharDevice volume). In such a namespace the kernel makes no device
node (mknod needs CAP_MKNOD in the host's user namespace), which the walls helper must cope
with. The command replaces this process (its pid is this one's), so signals reach it.

    own_userns.py BASE COUNT -- COMMAND [ARG...]      (as root)
"""
import ctypes
import os
import sys
import tempfile

CLONE_NEWNS, CLONE_NEWUSER = 0x00020000, 0x10000000
MS_BIND, MS_REC, MS_PRIVATE = 0x1000, 0x4000, 0x40000
MNT_DETACH = 2
libc = ctypes.CDLL(None, use_errno=True)


def check(result, what):
    if result != 0:
        sys.exit("own_userns: %s: %s" % (what, os.strerror(ctypes.get_errno())))


def mount(src, dst, fstype, flags):
    enc = lambda s: s.encode() if s is not None else None
    check(libc.mount(enc(src), enc(dst), enc(fstype), ctypes.c_ulong(flags), None), "mount " + dst)


def main():
    if len(sys.argv) < 5 or sys.argv[3] != "--":
        sys.exit("usage: own_userns.py BASE COUNT -- COMMAND [ARG...]")
    base, count, argv = int(sys.argv[1]), int(sys.argv[2]), sys.argv[4:]
    # Still the host's root: a mount namespace where /dev/net/tun is a 0666 node of its own
    # (a tmpfs holds it while it is bound; nothing of the host changes).
    check(libc.unshare(CLONE_NEWNS), "unshare(CLONE_NEWNS)")
    mount(None, "/", None, MS_REC | MS_PRIVATE)
    scratch = tempfile.mkdtemp(prefix="own-userns-")
    mount("tmpfs", scratch, "tmpfs", 0)
    node = scratch + "/tun"
    os.mknod(node, 0o020666, os.makedev(10, 200))
    os.chmod(node, 0o666)
    mount(node, "/dev/net/tun", None, MS_BIND)
    check(libc.umount2(scratch.encode(), MNT_DETACH), "umount " + scratch)
    os.rmdir(scratch)
    # The user namespace (and a mount namespace it owns); a child still in the host's writes
    # its maps, as a runtime does for a pod.
    go_r, go_w = os.pipe()
    parent = os.getpid()
    child = os.fork()
    if child == 0:
        os.close(go_w)
        os.read(go_r, 1)
        maps = "0 0 1\n%d %d %d\n" % (base, base, count)
        for name in ("uid_map", "gid_map"):
            with open("/proc/%d/%s" % (parent, name), "w") as f:
                f.write(maps)
        os._exit(0)
    os.close(go_r)
    check(libc.unshare(CLONE_NEWUSER | CLONE_NEWNS), "unshare(CLONE_NEWUSER | CLONE_NEWNS)")
    os.write(go_w, b"1")
    os.close(go_w)
    _, status = os.waitpid(child, 0)
    if status != 0:
        sys.exit("own_userns: writing the uid and gid maps failed")
    mount(None, "/", None, MS_REC | MS_PRIVATE)
    os.execvp(argv[0], argv)


main()
