/* switchboard-walls: the small privileged helper that puts a sandbox instance behind its walls
 * (docs/isolation.md). sandboxd spawns it through the engine's process supervisor; it never
 * decides anything — every path, uid and number comes from its argv, built by
 * lua/switchboard/shell/instance.lua from policies/isolation.lua.
 *
 *   switchboard-walls hold  [common] [--expose NAME]... [--hide PATH]... --workspace DIR
 *                           [--rootfs DIR] [--net host|none] [--outbound-if NAME] [--hostname NAME]
 *                           [--cg-write FILE=VALUE]... [--socket PATH --nofile N --fsize BYTES]
 *                           [--nice N] [--ro-bind PATH]... [--locale DIR] [--home /tmp/NAME]
 *                           [--disk-image NAME --disk-bytes N [--disk-reserve BYTES]
 *                            [--loop-record DIR]]
 *     Creates the instance: makes and joins its cgroups (--cgroup, created when missing, then
 *     the --cg-write limits), drops to the instance's host uid/gid, and runs bwrap with new
 *     user, PID, mount, IPC, UTS and network namespaces around `sleep infinity`. The network
 *     namespace is the instance's own either way: --net none leaves it only loopback; --net
 *     host gives it outbound access through pasta (Debian's passt), never the host's
 *     loopback services (see outbound_start). Prints "ready <pid>\n" (the host pid of the process inside the namespaces)
 *     once they exist, then waits: it lives exactly as long as the instance. Each --ro-bind
 *     directory (absolute) appears read-only at the same path inside (the resident's shared git
 *     objects). It is opened here (a directory, not a symlink) and handed to bwrap as an fd;
 *     bwrap still resolves that fd's path as the instance's uid, so where that uid cannot
 *     search the way to it (or to the workspace), it is staged first (stage_reachable). --locale
 *     DIR (on the host's own root only) is shown read-only at /usr/lib/locale the same way: the
 *     server's copy of the host's locales with a locale archive (shell/locale_view.lua). --home
 *     /tmp/NAME is made in the private /tmp, 0700 and the instance's uid's: its commands' HOME. It dies with its
 *     parent (PR_SET_PDEATHSIG), bwrap dies with it (--die-with-parent), and everything in the
 *     PID namespace dies with bwrap's init. With --disk-image the workspace is a file system of
 *     its own: the image NAME in the workspace directory (made N bytes when missing, every byte
 *     reserved on the host's disk while BYTES stay free beside it, else refused in words) is
 *     loop-mounted over that directory in the helper's private mount namespace, so the kernel
 *     refuses a write past N while the command writes, and the mount goes with the instance's
 *     last process (src/walls/disk.c). --loop-record DIR: the loop device is recorded in DIR (an
 *     empty file named by its number) as soon as it is attached, so the server — or, after a
 *     kill -9, the next one — gives it back even if nothing after succeeds.
 *
 *     With --socket it is also the instance's spawner ("serve"): it binds PATH (as the server's
 *     user, in a directory only the server reaches), then joins the instance's namespaces
 *     itself, so every process it forks is born inside the PID namespace and the cgroups. In
 *     one poll loop (src/walls/spawner.c) it takes commands — many per connection: the engine
 *     keeps one per instance — each with the client's stdio (SCM_RIGHTS), argv, env and cwd
 *     (src/walls/request.h), vforks each in a process group of its own with the rlimits, no
 *     capabilities and no_new_privs, forwards the client's signals to that group, kills the
 *     group when the command ends or the client's connection closes, and sends back the
 *     command's number and wait status.
 *
 *   switchboard-walls run SOCKET [--cwd DIR] -- PROGRAM ARG...
 *     The host side of one command (for diagnosis from a shell; the engine speaks the protocol
 *     itself, src/proc/link.c): sends its own stdin/stdout/stderr, argv and environment (never
 *     in the spawner's argv) to the spawner, forwards TERM/INT/HUP, and exits with the
 *     command's status (re-raising its signal). It dies with its parent; its socket closing
 *     kills the command's group at once.
 *
 *   switchboard-walls enter [common] --pid PID [--net host|none] [--nofile N] [--fsize BYTES]
 *                           [--cwd DIR] -- PROGRAM ARG...
 *     Runs one command inside an existing instance: joins its cgroups, applies the rlimits,
 *     drops to its uid/gid, enters its namespaces through a pidfd, forks into the PID
 *     namespace, and execs PROGRAM there with no capabilities and no_new_privs. Exits with the
 *     command's status (re-raising its signal), so the supervisor sees what it would have seen.
 *     (The first design; sandboxd now uses run. Kept for diagnosis: it migrates cgroups per
 *     command, which on cgroup v1 is slow under concurrency.)
 *
 *   switchboard-walls reap [--cgroup DIR]...
 *     Kills every process left in the cgroups (cgroup.kill on v2, SIGKILL to each member of
 *     cgroup.procs on v1, until empty) and removes the directories.
 *
 *   common: --uid UID --gid GID --cgroup DIR (repeatable)
 *
 * Exit statuses of the helper's own failures: 70 (EX_SOFTWARE) with one line on stderr
 * beginning "walls:" that names what failed and why.
 *
 * Where each step is (one file each, sharing src/walls/walls.h): options.c (the argv, die),
 * process.c (the uid, capabilities, rlimits, a status mirrored), cgroups.c (made, joined, reaped),
 * hold.c (an instance from nothing to ready, in order), mounts.c (the workspace's own file system
 * and a way to it the instance's uid can walk), disk.c (that file system's image), outbound.c
 * (pasta or a bridge port, for --net host; bridge.c the bridge itself), bwrap.c (bwrap's argv and
 * its child's pid), enter.c (joining an instance's namespaces; the enter mode), spawner.c (the
 * spawner's poll loop: every command of an instance), run.c (the host side of one command),
 * request.c (the spawner's protocol). This file is the helper's entry: the mode named by argv[1],
 * and the instance's init. */
#include <errno.h>
#include <string.h>
#include <unistd.h>

#include "walls/bridge.h"
#include "walls/walls.h"

#if defined(__SANITIZE_ADDRESS__)
/* LeakSanitizer's exit-time check ptraces this process from a helper thread, which cannot work
 * once we have entered another user namespace (it hangs there). The helper owns no heap memory
 * of its own (static buffers only; reap's FILE is closed), so leaks are checked by reading;
 * every other ASan check stays on. */
const char *__asan_default_options(void);
const char *__asan_default_options(void) { return "detect_leaks=0"; }
#endif

char **arg_area; /* main's argv: blanked by the spawner (serve) */

/* The instance's init (pid 2 of its PID namespace, bwrap's child), on the host's root: says
 * the view is complete on fd 4, keeps nothing of ours open, and sleeps until the instance
 * ends (the PID namespace's end kills it). */
static int init(void) __attribute__((noreturn));
static int init(void) {
  (void)!write(4, "ready\n", 6);
  close(4);
  close(6); /* this binary, as bwrap was handed it */
  for (;;)
    pause();
}

int main(int argc, char **argv) {
  options o;
  arg_area = argv;
  if (argc == 2 && strcmp(argv[1], "init") == 0)
    return init();
  if (argc >= 2 && strncmp(argv[1], "bridge-", 7) == 0) /* its own options: bridge.h */
    return walls_bridge_main(argc, argv);
  parse(argc, argv, &o);
  if (strcmp(o.mode, "hold") == 0)
    return hold(&o);
  if (strcmp(o.mode, "enter") == 0)
    return enter(&o);
  if (strcmp(o.mode, "reap") == 0)
    return reap(&o);
  if (strcmp(o.mode, "run") == 0)
    return run(&o);
  errno = 0;
  die("unknown mode '%s' (hold, enter or reap)", o.mode);
}
