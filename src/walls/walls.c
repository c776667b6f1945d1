/* switchboard-walls: the small privileged helper that puts a sandbox instance behind its walls
 * (docs/isolation.md). sandboxd spawns it through the engine's process supervisor; it never
 * decides anything — every path, uid and number comes from its argv, built by
 * lua/switchboard/shell/instance.lua from policies/isolation.lua.
 *
 *   switchboard-walls hold  [common] [--expose NAME]... [--hide PATH]... --workspace DIR
 *                           [--rootfs DIR] [--net host|none] [--outbound-if NAME] [--hostname NAME]
 *                           [--cg-write FILE=VALUE]... [--socket PATH --nofile N --fsize BYTES]
 *                           [--nice N] [--ro-bind PATH]... [--disk-image NAME --disk-bytes N
 *                           [--disk-reserve BYTES]]
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
 *     search the way to it (or to the workspace), it is staged first (stage_reachable). It dies with its
 *     parent (PR_SET_PDEATHSIG), bwrap dies with it (--die-with-parent), and everything in the
 *     PID namespace dies with bwrap's init. With --disk-image the workspace is a file system of
 *     its own: the image NAME in the workspace directory (made N bytes when missing, every byte
 *     reserved on the host's disk while BYTES stay free beside it, else refused in words) is
 *     loop-mounted over that directory in the helper's private mount namespace, so the kernel
 *     refuses a write past N while the command writes, and the mount goes with the instance's
 *     last process (src/walls/disk.c).
 *
 *     With --socket it is also the instance's spawner ("serve"): it binds PATH (as the server's
 *     user, in a directory only the server reaches), then joins the instance's namespaces
 *     itself, so every process it forks is born inside the PID namespace and the cgroups. Per
 *     connection it forks a handler that takes the client's stdio (SCM_RIGHTS), argv, env and
 *     cwd (src/walls/request.h), starts the command in a process group of its own with the
 *     rlimits, no capabilities and no_new_privs, forwards the client's signals to that group,
 *     kills the group when the client's socket closes or the command ends, and sends back the
 *     wait status.
 *
 *   switchboard-walls run SOCKET [--cwd DIR] -- PROGRAM ARG...
 *     The host side of one command (spawned by the engine like any command): sends its own
 *     stdin/stdout/stderr, argv and environment (never in the spawner's argv) to the spawner,
 *     forwards TERM/INT/HUP, and exits with the command's status (re-raising its signal). It
 *     dies with its parent; its socket closing kills the command's group at once.
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
 * beginning "walls:" that names what failed and why. */
#include <errno.h>
#include <fcntl.h>
#include <grp.h>
#include <limits.h>
#include <linux/capability.h>
#include <sched.h>
#include <signal.h>
#include <stdarg.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mount.h>
#include <sys/prctl.h>
#include <poll.h>
#include <linux/nsfs.h>
#include <sys/ioctl.h>
#include <sys/resource.h>
#include <sys/sysmacros.h>
#include <sys/signalfd.h>
#include <sys/socket.h>
#include <sys/un.h>
#include <sys/stat.h>
#include <sys/syscall.h>
#include <sys/types.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#include "walls/bridge.h"
#include "walls/disk.h"
#include "walls/request.h"

enum {
  EXIT_WALLS = 70,
  MAX_LIST = 64,       /* cgroups, exposed names, hidden paths, cgroup writes */
  MAX_BWRAP_ARGS = 512,
  REAP_ROUNDS = 200,   /* × 10 ms: how long reap waits for a cgroup to empty */
};

#ifndef CLONE_NEWCGROUP
#define CLONE_NEWCGROUP 0x02000000
#endif

#if defined(__SANITIZE_ADDRESS__)
/* LeakSanitizer's exit-time check ptraces this process from a helper thread, which cannot work
 * once we have entered another user namespace (it hangs there). The helper owns no heap memory
 * of its own (static buffers only; reap's FILE is closed), so leaks are checked by reading;
 * every other ASan check stays on. */
const char *__asan_default_options(void);
const char *__asan_default_options(void) { return "detect_leaks=0"; }
#endif

static char **arg_area; /* main's argv: blanked by the spawner (serve) */

typedef struct {
  const char *items[MAX_LIST];
  int n;
} list;

/* Everything the argv says; strings point into argv (owned by the kernel's copy). */
typedef struct {
  const char *mode;
  long uid, gid, pid;
  list cgroups, expose, hide, cg_writes, ro_binds;
  const char *workspace, *rootfs, *net, *hostname, *cwd;
  const char *disk_image;  /* hold: the workspace's own file system, an image of this name in it */
  const char *outbound_if; /* hold, --net host: the host interface pasta's sockets are bound to */
  const char *bridge_port; /* hold, --net host: through a bridge instead of pasta (bridge.h) */
  long long disk_bytes;    /* its size; -1: none (the workspace is the host's directory) */
  long long disk_reserve;  /* bytes the host's disk keeps free beside it (0: none) */
  const char *socket;      /* hold: the spawner's socket path to bind; run: to connect to */
  long long nofile, fsize; /* -1: leave as inherited */
  long long nice;          /* hold: bwrap's niceness (a spare built in the background); -1: ours */
  char **command;          /* enter: PROGRAM ARG... (NULL-terminated, inside argv) */
} options;

static void die(const char *fmt, ...) __attribute__((noreturn, format(printf, 1, 2)));
static void die(const char *fmt, ...) {
  int err = errno;
  va_list ap;
  va_start(ap, fmt);
  fputs("walls: ", stderr);
  vfprintf(stderr, fmt, ap);
  va_end(ap);
  if (err != 0)
    fprintf(stderr, ": %s", strerror(err));
  fputc('\n', stderr);
  _exit(EXIT_WALLS);
}

static long long number(const char *flag, const char *s) {
  char *end;
  errno = 0;
  long long v = strtoll(s, &end, 10);
  if (errno != 0 || *end != '\0' || end == s || v < 0) {
    errno = 0;
    die("%s needs a non-negative integer, not '%s'", flag, s);
  }
  return v;
}

static void push(list *l, const char *flag, const char *v) {
  if (l->n >= MAX_LIST) {
    errno = 0;
    die("too many %s (at most %d)", flag, MAX_LIST);
  }
  l->items[l->n++] = v;
}

static void parse(int argc, char **argv, options *o) {
  memset(o, 0, sizeof *o);
  o->uid = o->gid = o->pid = -1;
  o->nofile = o->fsize = o->nice = o->disk_bytes = -1;
  o->rootfs = "/";
  o->net = "host";
  o->hostname = "sandbox";
  o->cwd = "/workspace";
  errno = 0;
  if (argc < 2)
    die("usage: switchboard-walls hold|enter|reap [options] (docs/isolation.md)");
  o->mode = argv[1];
  int first = 2;
  if (strcmp(o->mode, "run") == 0 && argc > 2 && argv[2][0] != '-') {
    o->socket = argv[2]; /* run SOCKET -- PROGRAM ARG... */
    first = 3;
  }
  for (int i = first; i < argc; i++) {
    const char *f = argv[i];
    if (strcmp(f, "--") == 0) {
      o->command = &argv[i + 1];
      return;
    }
    if (i + 1 >= argc)
      die("%s needs a value", f);
    const char *v = argv[++i];
    if (strcmp(f, "--uid") == 0) o->uid = (long)number(f, v);
    else if (strcmp(f, "--gid") == 0) o->gid = (long)number(f, v);
    else if (strcmp(f, "--pid") == 0) o->pid = (long)number(f, v);
    else if (strcmp(f, "--nofile") == 0) o->nofile = number(f, v);
    else if (strcmp(f, "--fsize") == 0) o->fsize = number(f, v);
    else if (strcmp(f, "--nice") == 0) o->nice = number(f, v);
    else if (strcmp(f, "--disk-bytes") == 0) o->disk_bytes = number(f, v);
    else if (strcmp(f, "--disk-image") == 0) o->disk_image = v;
    else if (strcmp(f, "--disk-reserve") == 0) o->disk_reserve = number(f, v);
    else if (strcmp(f, "--cgroup") == 0) push(&o->cgroups, f, v);
    else if (strcmp(f, "--cg-write") == 0) push(&o->cg_writes, f, v);
    else if (strcmp(f, "--expose") == 0) push(&o->expose, f, v);
    else if (strcmp(f, "--hide") == 0) push(&o->hide, f, v);
    else if (strcmp(f, "--ro-bind") == 0) push(&o->ro_binds, f, v);
    else if (strcmp(f, "--workspace") == 0) o->workspace = v;
    else if (strcmp(f, "--rootfs") == 0) o->rootfs = v;
    else if (strcmp(f, "--net") == 0) o->net = v;
    else if (strcmp(f, "--hostname") == 0) o->hostname = v;
    else if (strcmp(f, "--outbound-if") == 0) o->outbound_if = v;
    else if (strcmp(f, "--bridge-port") == 0) o->bridge_port = v;
    else if (strcmp(f, "--cwd") == 0) o->cwd = v;
    else if (strcmp(f, "--socket") == 0) o->socket = v;
    else die("unknown option %s", f);
  }
}

/* ---- cgroups ----------------------------------------------------------------------------- */

/* Writes `value` to `path` (a cgroup control file). Returns 0 or -1 with errno. */
static int write_file(const char *path, const char *value) {
  int fd = open(path, O_WRONLY | O_CLOEXEC);
  if (fd < 0)
    return -1;
  size_t n = strlen(value);
  ssize_t w = write(fd, value, n);
  int err = errno;
  close(fd);
  if (w != (ssize_t)n) {
    errno = w < 0 ? err : EIO;
    return -1;
  }
  return 0;
}

static void join_cgroups(const options *o, bool create) {
  char path[PATH_MAX], pid[32];
  snprintf(pid, sizeof pid, "%d", (int)getpid());
  for (int i = 0; i < o->cgroups.n; i++) {
    const char *dir = o->cgroups.items[i];
    if (create && mkdir(dir, 0755) < 0 && errno != EEXIST)
      die("cannot create the cgroup %s", dir);
  }
  for (int i = 0; create && i < o->cg_writes.n; i++) {
    char file[PATH_MAX];
    const char *kv = o->cg_writes.items[i], *eq = strchr(kv, '=');
    if (eq == NULL || (size_t)(eq - kv) >= sizeof file) {
      errno = 0;
      die("--cg-write needs FILE=VALUE, not '%s'", kv);
    }
    memcpy(file, kv, (size_t)(eq - kv));
    file[eq - kv] = '\0';
    if (write_file(file, eq + 1) < 0)
      die("cannot set %s to %s", file, eq + 1);
  }
  for (int i = 0; i < o->cgroups.n; i++) {
    /* On cgroup v1, "0" written to `tasks` moves this thread (the helper has no other): the
     * kernel (6.0 on) skips the global threadgroup rwsem for it, whose write side waits an RCU
     * grace period (10 ms here, most of an instance's start); cgroup.procs takes it. v2 has
     * no `tasks` file. */
    snprintf(path, sizeof path, "%s/tasks", o->cgroups.items[i]);
    if (write_file(path, "0") == 0)
      continue;
    snprintf(path, sizeof path, "%s/cgroup.procs", o->cgroups.items[i]);
    if (write_file(path, pid) < 0)
      die("cannot join the cgroup %s", o->cgroups.items[i]);
  }
}

/* ---- credentials ------------------------------------------------------------------------- */

/* Becomes the instance's host uid/gid for good (real, effective, saved; no supplementary
 * groups). Afterwards this process has no capability in the host's user namespace. */
static void drop_to(const options *o) {
  if (o->uid < 0 || o->gid < 0 || o->uid == 0) {
    errno = 0;
    die("--uid (not 0) and --gid are required");
  }
  if (setgroups(0, NULL) < 0)
    die("setgroups");
  if (setresgid((gid_t)o->gid, (gid_t)o->gid, (gid_t)o->gid) < 0)
    die("setresgid %ld", o->gid);
  if (setresuid((uid_t)o->uid, (uid_t)o->uid, (uid_t)o->uid) < 0)
    die("setresuid %ld", o->uid);
}

/* Dies with the parent (the signal is cleared by credential changes, so this comes after
 * drop_to); if the parent is already gone, dies now. */
static void die_with_parent(pid_t parent) {
  if (prctl(PR_SET_PDEATHSIG, SIGKILL) < 0)
    die("prctl(PR_SET_PDEATHSIG)");
  if (getppid() != parent)
    _exit(EXIT_WALLS);
}

/* ---- outbound network (--net host) -----------------------------------------------------------
 *
 * The instance's network namespace gets outbound access through pasta (passt's namespace mode):
 * a user-mode TCP/UDP/ICMP translator on the host side that opens ordinary sockets as the
 * instance's host uid. It is told to forward no port either way (-t/-u/-T/-U none: by default
 * it would map ports bound on the host's loopback into the namespace) and not to map the
 * gateway address to the host (--no-map-gw), so nothing bound to the host's 127.0.0.1
 * (sandboxd, the resident, the bot's listener) is reachable from inside. Nor anything the host
 * has on [::] or 0.0.0.0: IPv4 only (--ipv4-only; pasta's MAC is the host's, so the gateway's
 * link-local address was the host's own, and pasta connects a link-local destination on the host's
 * interface), and its sockets bound to the interface of the host's default route
 * (--outbound-if4, SO_BINDTODEVICE), where the host's addresses on its other interfaces (a
 * container bridge's 10.88.0.1) are not local.
 *
 * pasta runs as the instance's uid and opens /dev/net/tun; Debian's udev makes that node 0666,
 * a host without udev may have it 0600. So a launcher, forked while the holder is still root,
 * gives pasta a private mount namespace whose /dev/net holds a tun node of the instance's uid
 * (nothing of the host changes), drops to that uid, starts pasta in the foreground and reports
 * once pasta has configured the namespace (pasta writes its pid file — a FIFO here — after
 * that). The launcher stays as pasta's parent: holder → launcher → pasta, each dying with its
 * parent (PR_SET_PDEATHSIG), so pasta ends with the instance, also after a kill -9 of sandboxd.
 * Both are in the instance's cgroups (its memory and pids limits count them). */
typedef struct {
  pid_t pid;   /* the launcher; 0: none (--net none) */
  int go, up;  /* holder → launcher: the instance's pid; launcher → holder: one byte, ready */
} outbound;

static void outbound_launcher(const options *o, pid_t holder, int go, int up) {
  char text[32];
  ssize_t n;
  do
    n = read(go, text, sizeof text - 1);
  while (n < 0 && errno == EINTR);
  if (n <= 0)
    _exit(EXIT_WALLS); /* the holder gave up */
  text[n] = '\0';
  long inner = strtol(text, NULL, 10);
  for (int fd = 3; fd < 1024; fd++) /* the holder's workspace, socket and binds: not ours */
    if (fd != up)
      close(fd);
  if (o->bridge_port != NULL) { /* a veth on sandboxd's bridge: set up, then nothing stays */
    char why[256];
    if (walls_bridge_attach(o->bridge_port, inner, why, sizeof why) < 0) {
      errno = 0;
      die("bridge: %s", why);
    }
    _exit(write(up, "1", 1) == 1 ? 0 : EXIT_WALLS);
  }
  if (unshare(CLONE_NEWNS) < 0 || mount(NULL, "/", NULL, MS_REC | MS_PRIVATE, NULL) < 0)
    die("pasta: a private mount namespace");
  int given_tun = open("/dev/net/tun", O_PATH | O_CLOEXEC); /* before the tmpfs covers it */
  if (mount("tmpfs", "/dev/net", "tmpfs", MS_NOSUID | MS_NOEXEC, "mode=0700,size=16k") < 0 ||
      mkfifo("/dev/net/ready", 0600) < 0 ||
      chown("/dev/net", (uid_t)o->uid, (gid_t)o->gid) < 0 ||
      chown("/dev/net/ready", (uid_t)o->uid, (gid_t)o->gid) < 0)
    die("pasta: cannot prepare /dev/net for the instance's uid");
  if (mknod("/dev/net/tun", S_IFCHR | 0600, makedev(10, 200)) == 0) {
    if (chown("/dev/net/tun", (uid_t)o->uid, (gid_t)o->gid) < 0)
      die("pasta: cannot give /dev/net/tun to the instance's uid");
  } else {
    /* The kernel makes device nodes only for CAP_MKNOD in the host's user namespace: in a
     * container of a user namespace of its own (a Kubernetes pod with hostUsers: false) the
     * container's own /dev/net/tun is bound here instead, which any uid must be able to open
     * (0666, as udev makes it). */
    int refused = errno, made = -1;
    struct stat st;
    char src[64];
    snprintf(src, sizeof src, "/proc/self/fd/%d", given_tun);
    if (refused != EPERM || given_tun < 0 || fstat(given_tun, &st) < 0 || !S_ISCHR(st.st_mode) ||
        (st.st_mode & 0006) != 0006 ||
        (made = open("/dev/net/tun", O_WRONLY | O_CREAT | O_CLOEXEC, 0600)) < 0 ||
        mount(src, "/dev/net/tun", NULL, MS_BIND, NULL) < 0)
      die("pasta: cannot make a tun node for the instance's uid, nor bind this container's "
          "/dev/net/tun (it must exist, mode 0666)");
    close(made);
  }
  if (given_tun >= 0)
    close(given_tun);
  /* bwrap makes the network namespace in a user namespace of its own and the instance's init in
   * one nested below it (for uid 1000 inside), so /proc/PID/ns/user is not the network's owner,
   * which pasta must join: it is asked of the namespace itself (NS_GET_USERNS), and both are
   * bound onto files of this private /dev/net for pasta to open by path. */
  char path[64];
  snprintf(path, sizeof path, "/proc/%ld/ns/net", inner);
  int net = open(path, O_RDONLY | O_CLOEXEC);
  int owner = net < 0 ? -1 : ioctl(net, NS_GET_USERNS);
  if (owner < 0)
    die("pasta: the instance's network namespace (pid %ld)", inner);
  char net_src[64], owner_src[64];
  snprintf(net_src, sizeof net_src, "/proc/self/fd/%d", net);
  snprintf(owner_src, sizeof owner_src, "/proc/self/fd/%d", owner);
  int f1 = open("/dev/net/netns", O_WRONLY | O_CREAT | O_CLOEXEC, 0600);
  int f2 = open("/dev/net/userns", O_WRONLY | O_CREAT | O_CLOEXEC, 0600);
  if (f1 < 0 || f2 < 0 || mount(net_src, "/dev/net/netns", NULL, MS_BIND, NULL) < 0 ||
      mount(owner_src, "/dev/net/userns", NULL, MS_BIND, NULL) < 0)
    die("pasta: cannot bind the instance's namespaces for it");
  close(f1);
  close(f2);
  close(net);
  close(owner);
  drop_to(o);
  die_with_parent(holder);
  int ready = open("/dev/net/ready", O_RDONLY | O_NONBLOCK | O_CLOEXEC);
  if (ready < 0)
    die("pasta: open its ready FIFO");
  pid_t me = getpid();
  pid_t pasta = fork();
  if (pasta < 0)
    die("fork pasta");
  if (pasta == 0) {
    die_with_parent(me);
    char *argv[] = {"pasta", "--foreground", "--quiet", "--config-net",
                    "-t", "none", "-u", "none", "-T", "none", "-U", "none", "--no-map-gw",
                    "--ipv4-only", "--netns", "/dev/net/netns", "--userns", "/dev/net/userns",
                    "--pid", "/dev/net/ready", NULL, NULL, NULL};
    size_t end = 0;
    while (argv[end] != NULL)
      end++;
    if (o->outbound_if != NULL) { /* into the two free slots; the last stays NULL */
      argv[end] = "--outbound-if4";
      argv[end + 1] = (char *)o->outbound_if;
    }
    execvp("pasta", argv);
    die("cannot run pasta (apt-get install passt)");
  }
  /* pasta writes its pid into the FIFO once the namespace's interface, address and routes are
   * set; it ending first is a failure (its own words are on stderr). */
  for (;;) {
    struct pollfd p = {ready, POLLIN, 0};
    int r = poll(&p, 1, 50);
    if (r > 0 && (p.revents & POLLIN)) {
      char pid_text[32];
      if (read(ready, pid_text, sizeof pid_text) > 0)
        break;
    }
    int status;
    if (waitpid(pasta, &status, WNOHANG) == pasta)
      _exit(EXIT_WALLS);
  }
  close(ready);
  if (write(up, "1", 1) != 1)
    _exit(EXIT_WALLS);
  close(up);
  int status;
  while (waitpid(pasta, &status, 0) < 0 && errno == EINTR) {
  }
  _exit(0);
}

/* Forks the launcher (we are still root here); it waits for outbound_go. */
static outbound outbound_start(const options *o) {
  outbound ob = {0, -1, -1};
  if (strcmp(o->net, "host") != 0)
    return ob;
  int go[2], up[2];
  if (pipe2(go, O_CLOEXEC) < 0 || pipe2(up, O_CLOEXEC) < 0)
    die("pipe");
  pid_t holder = getpid();
  ob.pid = fork();
  if (ob.pid < 0)
    die("fork the network launcher");
  if (ob.pid == 0) {
    close(go[1]);
    close(up[0]);
    outbound_launcher(o, holder, go[0], up[1]);
  }
  close(go[0]);
  close(up[1]);
  ob.go = go[1];
  ob.up = up[0];
  return ob;
}

/* The instance's namespaces exist (`inner` is its init, just cloned by bwrap): pasta starts
 * joining them now, while bwrap still builds the instance's view — pasta's own start (its tables
 * and buffers: tens of ms on a quiet host, seconds on a loaded one) runs beside bwrap's mounts and
 * the init's exec instead of after them. False when the launcher is gone. */
static bool outbound_go(outbound *ob, long inner) {
  if (ob->pid == 0)
    return true;
  char text[32];
  int len = snprintf(text, sizeof text, "%ld", inner);
  bool ok = write(ob->go, text, (size_t)len) == len;
  close(ob->go);
  ob->go = -1;
  return ok;
}

/* Returns once pasta has configured the network, false when it could not start. */
static bool outbound_ready(outbound *ob) {
  if (ob->pid == 0)
    return true;
  char byte;
  ssize_t got;
  do
    got = read(ob->up, &byte, 1);
  while (got < 0 && errno == EINTR);
  close(ob->up);
  return got == 1;
}

/* ---- hold --------------------------------------------------------------------------------- */

typedef struct {
  char *argv[MAX_BWRAP_ARGS];
  int n;
  char scratch[MAX_LIST][PATH_MAX]; /* paths built for --expose */
  int ro_fds[MAX_LIST];             /* --ro-bind directories, opened before the drop (CLOEXEC) */
  char ro_fd_text[MAX_LIST][16];    /* their numbers, as bwrap's arguments */
} bwrap_args;

static void arg(bwrap_args *b, const char *s) {
  if (b->n >= MAX_BWRAP_ARGS - 1) {
    errno = 0;
    die("too many bwrap arguments");
  }
  b->argv[b->n++] = (char *)s;
}

/* The instance's view: an empty read-only root with the exposed top-level entries of
 * --rootfs bound read-only (a symlink such as /bin -> usr/bin recreated as one), the hidden
 * paths covered by empty tmpfs, the workspace read-write at --cwd, private /tmp, /dev/shm,
 * /dev and /proc. Nothing else of the host is there. */
static void build_bwrap(const options *o, bwrap_args *b) {
  arg(b, "bwrap");
  arg(b, "--unshare-user");
  arg(b, "--unshare-pid");
  arg(b, "--unshare-ipc");
  arg(b, "--unshare-uts");
  /* Never the host's network namespace: 127.0.0.1 inside is the instance's own ("host" gets
   * outbound access through pasta: outbound_start). */
  if (strcmp(o->net, "none") != 0 && strcmp(o->net, "host") != 0) {
    errno = 0;
    die("--net is host or none, not '%s'", o->net);
  }
  arg(b, "--unshare-net");
  arg(b, "--uid"); arg(b, "1000");
  arg(b, "--gid"); arg(b, "1000");
  if (o->hostname[0] != '\0') { /* "": the UTS namespace is still its own, the name is kept */
    arg(b, "--hostname"); arg(b, o->hostname);
  }
  arg(b, "--die-with-parent");
  arg(b, "--new-session");
  arg(b, "--info-fd"); arg(b, "3");
  arg(b, "--tmpfs"); arg(b, "/");
  for (int i = 0; i < o->expose.n; i++) {
    const char *name = o->expose.items[i];
    char *src = b->scratch[i];
    if (strchr(name, '/') != NULL || strcmp(name, "..") == 0 || strcmp(name, ".") == 0) {
      errno = 0;
      die("--expose takes a top-level name, not '%s'", name);
    }
    snprintf(src, PATH_MAX, "%s/%s", strcmp(o->rootfs, "/") == 0 ? "" : o->rootfs, name);
    struct stat st;
    if (lstat(src, &st) < 0)
      continue; /* not on this host: nothing to show */
    char *dest = src + strlen(src) - strlen(name) - 1; /* "/NAME" */
    if (S_ISLNK(st.st_mode)) {
      static char targets[MAX_LIST][PATH_MAX];
      ssize_t n = readlink(src, targets[i], PATH_MAX - 1);
      if (n < 0)
        die("readlink %s", src);
      targets[i][n] = '\0';
      arg(b, "--symlink"); arg(b, targets[i]); arg(b, dest);
    } else {
      arg(b, "--ro-bind"); arg(b, src); arg(b, dest);
    }
  }
  for (int i = 0; i < o->hide.n; i++) {
    /* Covered only where the instance would see it: a directory by an empty tmpfs, a file
     * by /dev/null. */
    const char *path = o->hide.items[i];
    char host[PATH_MAX];
    struct stat st;
    if (path[0] != '/') {
      errno = 0;
      die("--hide takes an absolute path, not '%s'", path);
    }
    /* Only under an exposed entry: elsewhere there is nothing of the host to cover. */
    bool exposed = false;
    for (int j = 0; j < o->expose.n; j++) {
      size_t n = strlen(o->expose.items[j]);
      if (strncmp(path + 1, o->expose.items[j], n) == 0 && (path[n + 1] == '/' || path[n + 1] == '\0'))
        exposed = true;
    }
    snprintf(host, sizeof host, "%s%s", strcmp(o->rootfs, "/") == 0 ? "" : o->rootfs, path);
    if (!exposed || stat(host, &st) < 0)
      continue;
    if (S_ISDIR(st.st_mode)) {
      arg(b, "--tmpfs"); arg(b, path);
    } else {
      arg(b, "--ro-bind"); arg(b, "/dev/null"); arg(b, path);
    }
  }
  /* fd 5: the workspace opened by us before dropping to the instance's uid (staged where that
   * uid cannot walk to it: stage_reachable); a path swapped after that open changes nothing. */
  arg(b, "--bind-fd"); arg(b, "5"); arg(b, o->cwd);
  arg(b, "--tmpfs"); arg(b, "/tmp");
  arg(b, "--dev"); arg(b, "/dev");
  arg(b, "--tmpfs"); arg(b, "/dev/shm");
  arg(b, "--proc"); arg(b, "/proc");
  /* After /tmp's tmpfs, so a directory below /tmp is not covered by it. */
  for (int i = 0; i < o->ro_binds.n; i++) {
    snprintf(b->ro_fd_text[i], sizeof b->ro_fd_text[i], "%d", b->ro_fds[i]);
    arg(b, "--ro-bind-fd"); arg(b, b->ro_fd_text[i]); arg(b, o->ro_binds.items[i]);
  }
  arg(b, "--remount-ro"); arg(b, "/");
  arg(b, "--chdir"); arg(b, o->cwd);
  /* bwrap's info arrives before the mounts are done; the holder's first word on fd 4 says
   * the view is complete (entering earlier would join a half-built mount namespace). On the
   * host's own root the word comes from this helper itself (`init`, exec'd through fd 6, our
   * binary opened before bwrap started: one exec instead of sh's and sleep's); a rootfs of
   * its own may have a libc this binary cannot load, so there its sh and sleep do it. */
  arg(b, "--");
  if (strcmp(o->rootfs, "/") == 0) {
    arg(b, "/proc/self/fd/6"); arg(b, "init");
  } else {
    arg(b, "sh"); arg(b, "-c");
    arg(b, "echo ready >&4 && exec 4>&- && exec sleep infinity");
  }
  b->argv[b->n] = NULL;
}

/* Reads bwrap's info JSON ({"child-pid": N, ...}) to its end (bwrap closes it; closing it
 * early would kill bwrap with SIGPIPE) and returns N, or -1 when bwrap ended first. */
static long read_child_pid(int fd) {
  char buf[1024];
  size_t len = 0;
  for (;;) {
    ssize_t r = read(fd, buf + len, sizeof buf - 1 - len);
    if (r < 0 && errno == EINTR)
      continue;
    if (r <= 0)
      break;
    len += (size_t)r;
    if (len == sizeof buf - 1)
      break;
  }
  buf[len] = '\0';
  const char *k = strstr(buf, "\"child-pid\"");
  const char *colon = k ? strchr(k, ':') : NULL;
  return colon ? strtol(colon + 1, NULL, 10) : -1;
}

static int mirror_status(int status) {
  if (WIFEXITED(status))
    return WEXITSTATUS(status);
  int sig = WTERMSIG(status);
  signal(sig, SIG_DFL);
  kill(getpid(), sig);
  return 128 + sig;
}

static void set_limit(int resource, long long value, const char *name);
static int namespaces_of(long pid);
static int bind_spawner(const char *path);
static void enter_instance(long pid, pid_t parent);
static int serve(const options *o, int listener, pid_t bwrap);

/* ---- a way to the workspace the instance's uid can walk ---------------------------------- */

/* bwrap resolves a --bind-fd/--ro-bind-fd source by its path (the target of /proc/self/fd/N)
 * as the instance's uid, so every directory above it must be searchable by that uid: a --root
 * under /root (0700) is not. Returns the first directory above `path` the uid cannot search
 * (copied into `blocked`, its stat in `*st`), or false when the way is open. */
static bool way_blocked(const options *o, const char *path, char *blocked, size_t size, struct stat *st) {
  char p[PATH_MAX];
  snprintf(p, sizeof p, "%s", path);
  for (char *end = p; (end = strchr(end, '/')) != NULL; end++) {
    char keep = end[1];
    end[1] = '\0'; /* p is now one directory above the path, with its slash */
    bool last = keep == '\0';
    if (!last && stat(p, st) == 0) {
      mode_t bit = st->st_uid == (uid_t)o->uid ? S_IXUSR : st->st_gid == (gid_t)o->gid ? S_IXGRP : S_IXOTH;
      if ((st->st_mode & bit) == 0) {
        if (end > p)
          *end = '\0'; /* "/root", not "/root/" */
        snprintf(blocked, size, "%s", p);
        return true;
      }
    }
    end[1] = keep;
  }
  return false;
}

/* A mount namespace of this helper's own, made once (unshare needs CAP_SYS_ADMIN, which a
 * container's root may lack): the host's mounts still propagate in (a slave), ours never out.
 * bwrap and the instance inherit it, so what is mounted here exists only for the instance and
 * goes with its last process. Returns 0 or -1 with errno. */
static int private_mounts(void) {
  static bool done;
  if (done)
    return 0;
  if (unshare(CLONE_NEWNS) < 0 || mount(NULL, "/", NULL, MS_REC | MS_SLAVE, NULL) < 0)
    return -1;
  done = true;
  return 0;
}

/* The workspace's own file system (src/walls/disk.c) mounted over the workspace directory, open
 * as `ws`, in this helper's mount namespace; returns the mounted file system's root, open
 * (close-on-exec), and closes `ws`. */
static int mount_disk(const options *o, int ws) {
  char why[PATH_MAX + 256];
  struct stat below, top;
  if (o->disk_bytes < 1024 * 1024 || strchr(o->disk_image, '/') != NULL || o->disk_image[0] == '\0') {
    errno = 0;
    die("--disk-image takes a file name in the workspace and --disk-bytes at least 1 MiB");
  }
  if (private_mounts() < 0)
    die("the workspace's own file system needs a mount namespace of the helper's own");
  if (walls_disk_mount(ws, o->workspace, o->disk_image, o->disk_bytes, o->disk_reserve,
                       (int)(o->nice > 0 ? o->nice : 0), why, sizeof why) < 0) {
    errno = 0;
    die("the workspace's own file system (%lld bytes, policies/isolation.lua workspace_max_bytes) "
        "could not be made: %s", o->disk_bytes, why);
  }
  /* by its path again: the walk crosses into the mount (the old fd names the directory below) */
  int fs = open(o->workspace, O_RDONLY | O_DIRECTORY | O_NOFOLLOW | O_CLOEXEC);
  if (fs < 0 || fstat(fs, &top) < 0 || fstat(ws, &below) < 0 || top.st_dev == below.st_dev)
    die("the workspace's own file system is not at %s after mounting it", o->workspace);
  close(ws);
  /* the instance finds an empty /workspace, as before (`git clone URL .` needs one): mkfs's
   * lost+found goes (e2fsck makes it again if it ever needs it), and the mode is the host
   * directory's. A remount (after the instance before died) finds the root its uid's: chmod
   * needs the owner or CAP_FOWNER, which the units do not give, so the root is ours again
   * first (CAP_CHOWN, as the fchown after this) */
  (void)unlinkat(fs, "lost+found", AT_REMOVEDIR);
  if (fchown(fs, geteuid(), getegid()) < 0 || fchmod(fs, 0700) < 0)
    die("chmod the workspace's own file system");
  return fs;
}

/* A directory (open as `fd`) whose way is blocked is bind-mounted, in a mount namespace of this
 * helper's own (made on the first such directory: unshare needs CAP_SYS_ADMIN, which a
 * container's root may lack), below a fresh tmpfs over the spawner socket's directory (its
 * socket is bound already; the host's view is unchanged), whose way is /tmp's. Returns the
 * staged copy's fd (close-on-exec, at 10 or above); `fd` is closed. Where it cannot, dies
 * naming the directory in the way and its mode. */
static int stage_reachable(const options *o, int fd, const char *path, int k) {
  static bool staged;
  char blocked[PATH_MAX], dir[PATH_MAX], src[32];
  struct stat st;
  if (!way_blocked(o, path, blocked, sizeof blocked, &st))
    return fd;
  const char *slash = o->socket ? strrchr(o->socket, '/') : NULL;
  int len = slash ? (int)(slash - o->socket) : 0;
  if (!staged && (len == 0 || private_mounts() < 0 ||
                  (snprintf(dir, sizeof dir, "%.*s", len, o->socket),
                   mount("tmpfs", dir, "tmpfs", MS_NOSUID | MS_NODEV | MS_NOEXEC, "mode=0711,size=64k") < 0))) {
    errno = 0;
    die("the instance's uid %ld cannot reach %s: %s is mode %04o (owner uid %d), and bubblewrap "
        "resolves the path as that uid (a mount namespace to bypass it needs CAP_SYS_ADMIN). Make "
        "it searchable (chmod o+x %s) or choose a --root whose parents are (docs/isolation.md)",
        o->uid, path, blocked, (unsigned)(st.st_mode & 07777), (int)st.st_uid, blocked);
  }
  staged = true;
  /* A bind mount's source must be in this namespace: the directory again, here, and the same
   * one (a path swapped meanwhile is refused). */
  int here = open(path, O_RDONLY | O_DIRECTORY | O_NOFOLLOW | O_CLOEXEC);
  struct stat was, now;
  if (here < 0 || fstat(fd, &was) < 0 || fstat(here, &now) < 0 || was.st_dev != now.st_dev ||
      was.st_ino != now.st_ino)
    die("%s changed while the instance was being made", path);
  snprintf(dir, sizeof dir, "%.*s/%d", len, o->socket, k);
  snprintf(src, sizeof src, "/proc/self/fd/%d", here);
  if (mkdir(dir, 0711) < 0 || mount(src, dir, NULL, MS_BIND, NULL) < 0)
    die("cannot stage %s at %s for the instance's uid", path, dir);
  close(here);
  int again = open(dir, O_RDONLY | O_DIRECTORY | O_NOFOLLOW | O_CLOEXEC);
  int moved = again < 0 ? -1 : fcntl(again, F_DUPFD_CLOEXEC, 10);
  if (moved < 0)
    die("cannot open the staged %s", dir);
  close(again);
  close(fd);
  return moved;
}

static int hold(const options *o) {
  pid_t parent = getppid();
  if (o->workspace == NULL) {
    errno = 0;
    die("hold needs --workspace");
  }
  join_cgroups(o, true);
  /* The workspace becomes the instance's own (a symlink in its place is refused); the fd goes
   * to bwrap as the source of its bind mount. */
  int ws = open(o->workspace, O_RDONLY | O_DIRECTORY | O_NOFOLLOW | O_CLOEXEC);
  if (ws < 0 || fchown(ws, (uid_t)o->uid, (gid_t)o->gid) < 0)
    die("cannot give the workspace %s to uid %ld", o->workspace, o->uid);
  if (o->disk_image != NULL) { /* the instance's /workspace is then a file system of its own */
    ws = mount_disk(o, ws);
    if (fchown(ws, (uid_t)o->uid, (gid_t)o->gid) < 0)
      die("cannot give the workspace's own file system to uid %ld", o->uid);
  }
  /* Bound while we are still the server's user, in a directory only it can reach; the
   * listening fd is all we keep of it after dropping to the instance's uid. */
  int listener = o->socket ? bind_spawner(o->socket) : -1;
  /* built before the fork: the child only execs */
  static bwrap_args b;
  /* Read-only binds: opened (a directory, not a symlink) at 10 or above, clear of the 3-5
   * bwrap takes; close-on-exec until the child clears it for bwrap alone, so no command of the
   * instance inherits one. */
  for (int k = 0; k < o->ro_binds.n; k++) {
    const char *path = o->ro_binds.items[k];
    int fd = path[0] == '/' ? open(path, O_RDONLY | O_DIRECTORY | O_NOFOLLOW | O_CLOEXEC) : -1;
    if (fd < 0 && path[0] != '/')
      errno = 0;
    b.ro_fds[k] = fd < 0 ? -1 : fcntl(fd, F_DUPFD_CLOEXEC, 10);
    if (fd >= 0)
      close(fd);
    if (b.ro_fds[k] < 0)
      die("--ro-bind takes an absolute directory; cannot open '%s'", path);
    b.ro_fds[k] = stage_reachable(o, b.ro_fds[k], path, k + 1);
  }
  ws = stage_reachable(o, ws, o->workspace, 0);
  outbound ob = outbound_start(o); /* forked while root: see outbound_launcher */
  drop_to(o);
  die_with_parent(parent);
  int info[2], ready[2];
  if (pipe2(info, O_CLOEXEC) < 0 || pipe2(ready, O_CLOEXEC) < 0)
    die("pipe");
  int self_exe = open("/proc/self/exe", O_RDONLY | O_CLOEXEC); /* the init, for build_bwrap */
  if (self_exe < 0)
    die("open /proc/self/exe");
  build_bwrap(o, &b);
  pid_t pid = fork();
  if (pid < 0)
    die("fork");
  if (pid == 0) {
    /* fds 3, 4 and 5 for bwrap: first out of the way (any source may itself be 3-5), then into
     * place (dup2 clears O_CLOEXEC on the copies; the detours keep theirs). */
    int i = fcntl(info[1], F_DUPFD_CLOEXEC, 10), r = fcntl(ready[1], F_DUPFD_CLOEXEC, 10),
        w = fcntl(ws, F_DUPFD_CLOEXEC, 10), x = fcntl(self_exe, F_DUPFD_CLOEXEC, 10);
    if (i < 0 || r < 0 || w < 0 || x < 0 || dup2(i, 3) < 0 || dup2(r, 4) < 0 ||
        dup2(w, 5) < 0 || dup2(x, 6) < 0)
      _exit(EXIT_WALLS);
    for (int k = 0; k < o->ro_binds.n; k++)
      if (fcntl(b.ro_fds[k], F_SETFD, 0) < 0)
        _exit(EXIT_WALLS);
    /* A spare's build yields the CPU to the commands running meanwhile. Only bwrap (its mounts,
     * then an init that sleeps) is niced: the spawner, and so every command, keeps ours. */
    if (o->nice > 0 && setpriority(PRIO_PROCESS, 0, (int)(o->nice > 19 ? 19 : o->nice)) < 0)
      die("setpriority %lld", o->nice);
    execvp("bwrap", b.argv);
    die("cannot run bwrap (apt-get install bubblewrap)");
  }
  close(info[1]);
  close(ready[1]);
  close(ws);
  for (int k = 0; k < o->ro_binds.n; k++)
    close(b.ro_fds[k]);
  close(self_exe);
  long inner = read_child_pid(info[0]);
  close(info[0]);
  bool outbound_ok = inner <= 0 || outbound_go(&ob, inner); /* beside the view's making */
  char word[8];
  ssize_t got;
  do
    got = read(ready[0], word, sizeof word);
  while (got < 0 && errno == EINTR);
  close(ready[0]);
  bool cloned = inner > 0; /* bwrap reported its child: the namespaces exist */
  if (got <= 0)
    inner = -1;
  if (inner > 0 && !(outbound_ok && outbound_ready(&ob))) {
    errno = 0;
    die("the instance's outbound network (%s) could not be set up (its message is above)",
        o->bridge_port != NULL ? "bridge" : "pasta");
  }
  if (inner > 0 && listener >= 0)
    enter_instance(inner, parent);
  if (inner > 0) {
    printf("ready %ld\n", inner);
    fflush(stdout);
  }
  if (inner > 0 && listener >= 0)
    return serve(o, listener, pid);
  int status;
  while (waitpid(pid, &status, 0) < 0)
    if (errno != EINTR)
      die("waitpid");
  if (inner <= 0) {
    errno = 0;
    /* which step says where to look: the kernel's namespace limits, or the mounts bwrap makes
     * and the init it then runs */
    die(cloned ? "bwrap made the instance's namespaces but could not finish its view or start its init "
                 "(its message is above)"
               : "bwrap could not create the instance's namespaces (its message is above)");
  }
  return mirror_status(status);
}

/* ---- enter -------------------------------------------------------------------------------- */

/* Lowers a limit to `value`; never raises one (a server started under a lower hard limit
 * keeps it for its instances). */
static void set_limit(int resource, long long value, const char *name) {
  if (value < 0)
    return;
  struct rlimit cur;
  if (getrlimit(resource, &cur) == 0 && cur.rlim_max != RLIM_INFINITY && (rlim_t)value > cur.rlim_max)
    value = (long long)cur.rlim_max;
  struct rlimit rl = {(rlim_t)value, (rlim_t)value};
  if (setrlimit(resource, &rl) < 0)
    die("setrlimit %s %lld", name, value);
}

/* Namespaces of `pid` that differ from ours: the ones to enter. */
static int namespaces_of(long pid) {
  static const struct { const char *name; int flag; } kinds[] = {
      {"user", CLONE_NEWUSER}, {"mnt", CLONE_NEWNS}, {"pid", CLONE_NEWPID},
      {"ipc", CLONE_NEWIPC},   {"uts", CLONE_NEWUTS}, {"net", CLONE_NEWNET},
  };
  int flags = 0;
  for (size_t i = 0; i < sizeof kinds / sizeof kinds[0]; i++) {
    char theirs[64], mine[64], a[64], b[64];
    snprintf(theirs, sizeof theirs, "/proc/%ld/ns/%s", pid, kinds[i].name);
    snprintf(mine, sizeof mine, "/proc/self/ns/%s", kinds[i].name);
    ssize_t na = readlink(theirs, a, sizeof a - 1), nb = readlink(mine, b, sizeof b - 1);
    if (na < 0 || nb < 0)
      die("cannot read %s", na < 0 ? theirs : mine);
    a[na] = b[nb] = '\0';
    if (strcmp(a, b) != 0)
      flags |= kinds[i].flag;
  }
  return flags;
}

static void drop_capabilities(void) {
  struct __user_cap_header_struct h = {_LINUX_CAPABILITY_VERSION_3, 0};
  struct __user_cap_data_struct d[2];
  memset(d, 0, sizeof d);
  if (syscall(SYS_capset, &h, d) < 0)
    die("capset");
  if (prctl(PR_SET_NO_NEW_PRIVS, 1, 0, 0, 0) < 0)
    die("prctl(PR_SET_NO_NEW_PRIVS)");
}

static int enter(const options *o) {
  pid_t parent = getppid();
  if (o->pid <= 0 || o->command == NULL || o->command[0] == NULL) {
    errno = 0;
    die("enter needs --pid and -- PROGRAM");
  }
  /* Taken while we still see the host's /proc; the pidfd pins the exact process, so a pid
   * reused after the instance died is refused below rather than entered. */
  int pidfd = (int)syscall(SYS_pidfd_open, (pid_t)o->pid, 0);
  if (pidfd < 0)
    die("the instance's init (pid %ld) is gone", o->pid);
  int flags = namespaces_of(o->pid);
  if (!(flags & CLONE_NEWUSER) || !(flags & CLONE_NEWPID)) {
    errno = 0;
    die("pid %ld is not an instance (it shares our user or PID namespace)", o->pid);
  }
  join_cgroups(o, false);
  set_limit(RLIMIT_NOFILE, o->nofile, "nofile");
  set_limit(RLIMIT_FSIZE, o->fsize, "fsize");
  drop_to(o);
  die_with_parent(parent);
  /* As the namespaces' owner uid we hold every capability inside them, which setns needs. */
  if (setns(pidfd, flags) < 0)
    die("setns into the instance (pid %ld)", o->pid);
  close(pidfd);
  /* The deadline's TERM goes to our whole process group: the command gets it and ends; we
   * stay to report its status. (A KILL ends us, and PR_SET_PDEATHSIG ends the command.) */
  signal(SIGTERM, SIG_IGN);
  signal(SIGINT, SIG_IGN);
  signal(SIGHUP, SIG_IGN);
  pid_t me = getpid();
  pid_t pid = fork(); /* the first child after setns(CLONE_NEWPID) is inside the namespace */
  if (pid < 0)
    die("fork into the instance");
  if (pid == 0) {
    signal(SIGTERM, SIG_DFL);
    signal(SIGINT, SIG_DFL);
    signal(SIGHUP, SIG_DFL);
    if (prctl(PR_SET_PDEATHSIG, SIGKILL) < 0)
      die("prctl(PR_SET_PDEATHSIG)");
    (void)me; /* getppid() is 0 here: our parent is outside the PID namespace */
    if (chdir(o->cwd) < 0)
      die("chdir %s", o->cwd);
    drop_capabilities();
    execvp(o->command[0], o->command);
    fprintf(stderr, "walls: cannot run %s: %s\n", o->command[0], strerror(errno));
    _exit(errno == ENOENT ? 127 : 126);
  }
  int status;
  while (waitpid(pid, &status, 0) < 0)
    if (errno != EINTR)
      die("waitpid");
  return mirror_status(status);
}

/* ---- serve: commands start from inside the instance ------------------------------------- */

/* A unix stream socket listening at `path` (an old one there is replaced), mode 0600. */
static int bind_spawner(const char *path) {
  struct sockaddr_un a;
  memset(&a, 0, sizeof a);
  a.sun_family = AF_UNIX;
  if (strlen(path) >= sizeof a.sun_path) {
    errno = 0;
    die("the spawner's socket path is too long (%zu bytes, at most %zu): %s", strlen(path),
        sizeof a.sun_path - 1, path);
  }
  strcpy(a.sun_path, path);
  int fd = socket(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0);
  if (fd < 0)
    die("socket");
  (void)unlink(path);
  if (bind(fd, (struct sockaddr *)&a, sizeof a) < 0 || chmod(path, 0600) < 0 || listen(fd, 128) < 0)
    die("cannot listen at %s", path);
  return fd;
}

/* The holder joins the instance's namespaces (as enter did per command): its children are
 * born inside the PID namespace, and it is already in the instance's cgroups, so a command
 * migrates nothing. Not dumpable: a command (same uid, no capability) cannot ptrace it. */
static void enter_instance(long pid, pid_t parent) {
  int pidfd = (int)syscall(SYS_pidfd_open, (pid_t)pid, 0);
  if (pidfd < 0)
    die("the instance's init (pid %ld) is gone", pid);
  int flags = namespaces_of(pid);
  if (setns(pidfd, flags) < 0)
    die("setns into the instance (pid %ld)", pid);
  close(pidfd);
  if (prctl(PR_SET_DUMPABLE, 0) < 0)
    die("prctl(PR_SET_DUMPABLE)");
  die_with_parent(parent); /* the credential change of setns cleared it */
}

static int read_full(int fd, void *buf, size_t len) {
  size_t got = 0;
  while (got < len) {
    ssize_t r = read(fd, (char *)buf + got, len - got);
    if (r < 0 && errno == EINTR)
      continue;
    if (r <= 0)
      return -1;
    got += (size_t)r;
  }
  return 0;
}

static int write_full(int fd, const void *buf, size_t len) {
  size_t put = 0;
  while (put < len) {
    ssize_t w = send(fd, (const char *)buf + put, len - put, MSG_NOSIGNAL);
    if (w < 0 && errno == EINTR)
      continue;
    if (w <= 0)
      return -1;
    put += (size_t)w;
  }
  return 0;
}

/* ---- the spawner's connections ------------------------------------------------------------ */

/* The spawner serves every command of its instance itself, in one poll loop: no process per
 * connection. A connection carries one command: the header (u32 body length, with the
 * command's stdin, stdout and stderr as SCM_RIGHTS), the body (request.h), then single bytes,
 * each a signal for the command's group; back goes the command's wait status (4 bytes). The
 * socket closing before the command ends means SIGKILL to its group at once (the client — the
 * engine, or `run` — is gone). */
enum { MAX_CONNS = 256 }; /* commands at once in one instance; pids_max bounds them anyway */

typedef struct {
  bool used;
  int fd;               /* the connection (non-blocking); -1 once the client has gone */
  int fds[3];           /* the command's stdin, stdout, stderr as received; -1: none (yet) */
  unsigned char hdr[4]; /* the header's bytes so far */
  size_t hdr_got;
  uint32_t len;         /* the body's length, from the header */
  char *body;           /* owned; the body's bytes so far */
  size_t got;
  pid_t pid;            /* the command, also its process group; 0 until it starts */
} conn;

static conn conns[MAX_CONNS]; /* static: the spawner has no other long-lived heap */

static void conn_drop_request(conn *c) {
  for (int i = 0; i < 3; i++) {
    if (c->fds[i] >= 0)
      close(c->fds[i]);
    c->fds[i] = -1;
  }
  free(c->body);
  c->body = NULL;
}

static void conn_init(conn *c) {
  memset(c, 0, sizeof *c);
  c->fd = c->fds[0] = c->fds[1] = c->fds[2] = -1;
}

static void conn_free(conn *c) {
  conn_drop_request(c);
  if (c->fd >= 0)
    close(c->fd);
  conn_init(c);
}

/* Sends the 4-byte wait status; the client reads nothing else, so its receive buffer has
 * room (a lost status reads as "the instance ended" there, never as a wrong status). */
static void conn_reply(conn *c, int status) {
  if (c->fd >= 0)
    (void)!send(c->fd, &status, sizeof status, MSG_NOSIGNAL | MSG_DONTWAIT);
}

/* A request that cannot run: its reason on the command's stderr (when it came), status 70. */
static void conn_refuse(conn *c, const char *why) {
  if (c->fds[2] >= 0)
    dprintf(c->fds[2], "walls: %s\n", why);
  conn_reply(c, EXIT_WALLS << 8);
  conn_free(c);
}

/* Reads what there is of the header. Returns 1 when it is complete, 0 to wait for more, -1
 * when the connection is done for (closed, or not exactly three fds with the first byte). */
static int receive_header(conn *c) {
  union {
    char buf[CMSG_SPACE(4 * sizeof(int))];
    struct cmsghdr align;
  } control;
  struct iovec iov = {c->hdr + c->hdr_got, sizeof c->hdr - c->hdr_got};
  struct msghdr msg;
  memset(&msg, 0, sizeof msg);
  msg.msg_iov = &iov;
  msg.msg_iovlen = 1;
  msg.msg_control = control.buf;
  msg.msg_controllen = sizeof control.buf;
  ssize_t r = recvmsg(c->fd, &msg, MSG_CMSG_CLOEXEC | MSG_DONTWAIT);
  if (r < 0 && (errno == EAGAIN || errno == EINTR))
    return 0;
  if (r <= 0)
    return -1;
  int got = 0, fds[4] = {-1, -1, -1, -1};
  for (struct cmsghdr *m = CMSG_FIRSTHDR(&msg); m != NULL; m = CMSG_NXTHDR(&msg, m)) {
    if (m->cmsg_level != SOL_SOCKET || m->cmsg_type != SCM_RIGHTS)
      continue;
    size_t n = (m->cmsg_len - CMSG_LEN(0)) / sizeof(int);
    for (size_t i = 0; i < n; i++) {
      int fd;
      memcpy(&fd, CMSG_DATA(m) + i * sizeof(int), sizeof(int));
      if (got < 4)
        fds[got++] = fd;
      else
        close(fd);
    }
  }
  bool first = c->hdr_got == 0;
  c->hdr_got += (size_t)r;
  if (first && got == 3 && !(msg.msg_flags & MSG_CTRUNC)) {
    memcpy(c->fds, fds, sizeof c->fds);
    got = 0;
  }
  for (int i = 0; i < got; i++)
    close(fds[i]);
  if (c->fds[0] < 0)
    return -1; /* the fds come with the first byte, exactly three, or the request is void */
  if (c->hdr_got < sizeof c->hdr)
    return 0;
  memcpy(&c->len, c->hdr, sizeof c->len);
  return 1;
}

/* Reads what there is of the body. Returns 1 when complete, 0 to wait, -1 on a closed socket. */
static int receive_body(conn *c) {
  while (c->got < c->len) {
    ssize_t r = read(c->fd, c->body + c->got, c->len - c->got);
    if (r < 0 && (errno == EAGAIN || errno == EINTR))
      return 0;
    if (r <= 0)
      return -1;
    c->got += (size_t)r;
  }
  return 1;
}

/* In the vforked child (it shares the spawner's memory until exec: system calls only, _exit
 * on every failure): the received fds become 0-2, then the command runs in a process group of
 * its own with the rlimits, no capabilities and no_new_privs. */
static void exec_command(const options *o, const walls_request *req, const int fds[3])
    __attribute__((noreturn));
static void exec_command(const options *o, const walls_request *req, const int fds[3]) {
  extern char **environ;
  sigset_t none;
  sigemptyset(&none);
  sigprocmask(SIG_SETMASK, &none, NULL);
  /* out of the way of 0-2 first (a received fd may already be one of them), then into place
   * (dup2 clears close-on-exec on the copies; everything else of the spawner's has it) */
  int moved[3];
  for (int i = 0; i < 3; i++)
    if ((moved[i] = fcntl(fds[i], F_DUPFD_CLOEXEC, 10)) < 0)
      _exit(EXIT_WALLS);
  for (int i = 0; i < 3; i++)
    if (dup2(moved[i], i) < 0)
      _exit(EXIT_WALLS);
  if (setpgid(0, 0) < 0)
    die("setpgid");
  if (prctl(PR_SET_PDEATHSIG, SIGKILL) < 0)
    die("prctl(PR_SET_PDEATHSIG)");
  set_limit(RLIMIT_NOFILE, o->nofile, "nofile");
  set_limit(RLIMIT_FSIZE, o->fsize, "fsize");
  if (chdir(req->cwd) < 0)
    die("chdir %s", req->cwd);
  drop_capabilities();
  environ = (char **)req->envp; /* execvp searches the command's own PATH */
  execvp(req->argv[0], req->argv);
  fprintf(stderr, "walls: cannot run %s: %s\n", req->argv[0], strerror(errno));
  _exit(errno == ENOENT ? 127 : 126);
}

/* The request is complete: parse it and fork the command (a child of the spawner, so born
 * inside the PID namespace and the instance's cgroups). */
static void start_command(const options *o, conn *c) {
  static walls_request req; /* large (pointer arrays); used only between parse and fork */
  const char *why = "";
  if (walls_request_parse(c->body, c->len, &req, &why) < 0) {
    char line[160];
    snprintf(line, sizeof line, "a malformed request: %s", why);
    conn_refuse(c, line);
    return;
  }
  /* vfork, not fork (issue 28): the child borrows the spawner's memory until its exec instead
   * of copying its page tables, and the spawner waits that long. Safe here because the spawner
   * installs no signal handlers (SIGCHLD is blocked and read from a signalfd, the rest keep
   * their dispositions), the child only makes system calls, dies with _exit, and the one global
   * it writes, environ, is put back below once the child has exec'd or died. */
  extern char **environ;
  char **own_environ = environ;
  pid_t pid = vfork();
  if (pid == 0)
    exec_command(o, &req, c->fds);
  environ = own_environ;
  if (pid < 0) {
    conn_refuse(c, "cannot fork into the instance (its process limit?)");
    return;
  }
  (void)setpgid(pid, pid); /* also here: a signal forwarded at once must find the group */
  c->pid = pid;
  conn_drop_request(c);
}

/* Progress on a readable connection. */
static void conn_readable(const options *o, conn *c) {
  if (c->pid > 0) { /* running: signal bytes, or the client's end */
    unsigned char sig[16];
    ssize_t n = read(c->fd, sig, sizeof sig);
    if (n < 0 && (errno == EAGAIN || errno == EINTR))
      return;
    if (n <= 0) {
      kill(-c->pid, SIGKILL); /* the client was killed: so is the command */
      close(c->fd);
      c->fd = -1; /* the slot stays until the command is reaped */
      return;
    }
    for (ssize_t i = 0; i < n; i++)
      if (sig[i] == SIGTERM || sig[i] == SIGINT || sig[i] == SIGHUP || sig[i] == SIGKILL ||
          sig[i] == SIGQUIT || sig[i] == SIGUSR1 || sig[i] == SIGUSR2 || sig[i] == SIGSTOP ||
          sig[i] == SIGCONT)
        kill(-c->pid, sig[i]);
    return;
  }
  if (c->hdr_got < sizeof c->hdr) {
    int h = receive_header(c);
    if (h < 0) {
      conn_free(c);
      return;
    }
    if (h == 0)
      return;
    if (c->len > WALLS_MAX_REQUEST) {
      conn_refuse(c, "a request over the size limit");
      return;
    }
    c->body = malloc(c->len ? c->len : 1);
    if (c->body == NULL) {
      conn_refuse(c, "out of memory for the request");
      return;
    }
  }
  int b = receive_body(c);
  if (b < 0)
    conn_free(c);
  else if (b > 0)
    start_command(o, c);
}

/* Reaps every child that has ended: bwrap (the instance is over: returns true with its wait
 * status in *bwrap_status) or a command (its group is killed, its status sent). */
static bool reap_children(pid_t bwrap, int *bwrap_status) {
  int status;
  pid_t done;
  bool over = false;
  while ((done = waitpid(-1, &status, WNOHANG)) > 0) {
    if (done == bwrap) {
      *bwrap_status = status;
      over = true;
      continue;
    }
    for (int i = 0; i < MAX_CONNS; i++) {
      conn *c = &conns[i];
      if (c->used && c->pid == done) {
        kill(-done, SIGKILL); /* what it left in its group dies with it */
        conn_reply(c, status);
        conn_free(c);
        break;
      }
    }
  }
  return over;
}

static void accept_all(int listener) {
  for (;;) {
    int fd = accept4(listener, NULL, NULL, SOCK_CLOEXEC | SOCK_NONBLOCK);
    if (fd < 0)
      return;
    conn *c = NULL;
    for (int i = 0; i < MAX_CONNS && c == NULL; i++)
      if (!conns[i].used)
        c = &conns[i];
    if (c == NULL) {
      close(fd); /* the client sees the socket close without a status */
      continue;
    }
    c->used = true;
    c->fd = fd;
  }
}

/* The holder's loop; ends with bwrap (the instance), returning its status mirrored. */
static int serve(const options *o, int listener, pid_t bwrap) {
  /* Outside the PID namespace nothing inside sees this process; its arguments (host paths,
   * uids, cgroups) are blanked anyway, as a second line. */
  for (int i = 1; arg_area != NULL && arg_area[i] != NULL; i++)
    memset(arg_area[i], 0, strlen(arg_area[i]));
  sigset_t chld;
  sigemptyset(&chld);
  sigaddset(&chld, SIGCHLD);
  if (sigprocmask(SIG_BLOCK, &chld, NULL) < 0)
    die("sigprocmask");
  int sfd = signalfd(-1, &chld, SFD_CLOEXEC | SFD_NONBLOCK);
  if (sfd < 0)
    die("signalfd");
  if (fcntl(listener, F_SETFL, O_NONBLOCK) < 0)
    die("fcntl");
  for (int i = 0; i < MAX_CONNS; i++)
    conn_init(&conns[i]);
  static struct pollfd p[MAX_CONNS + 2];
  static int which[MAX_CONNS + 2];
  int bwrap_status = 0;
  for (;;) {
    int n = 0;
    p[n++] = (struct pollfd){listener, POLLIN, 0};
    p[n++] = (struct pollfd){sfd, POLLIN, 0};
    for (int i = 0; i < MAX_CONNS; i++)
      if (conns[i].used && conns[i].fd >= 0) {
        which[n] = i;
        p[n++] = (struct pollfd){conns[i].fd, POLLIN, 0};
      }
    if (poll(p, (nfds_t)n, -1) < 0) {
      if (errno == EINTR)
        continue;
      die("poll");
    }
    if (p[1].revents) {
      struct signalfd_siginfo si;
      while (read(sfd, &si, sizeof si) > 0) {
      }
      if (reap_children(bwrap, &bwrap_status))
        return mirror_status(bwrap_status); /* the PID namespace took every command with it */
    }
    for (int k = 2; k < n; k++) {
      conn *c = &conns[which[k]];
      if (p[k].revents && c->used && c->fd == p[k].fd)
        conn_readable(o, c);
    }
    if (p[0].revents & POLLIN)
      accept_all(listener);
  }
}

/* ---- run: the host side of one command --------------------------------------------------- */

static volatile sig_atomic_t run_socket = -1;

/* TERM, INT and HUP to the client (the supervisor's deadline, an abort) go on to the command's
 * group as one byte each. */
static void forward_signal(int sig) {
  int saved = errno;
  unsigned char b = (unsigned char)sig;
  if (run_socket >= 0)
    (void)!send(run_socket, &b, 1, MSG_NOSIGNAL | MSG_DONTWAIT);
  errno = saved;
}

static int run(const options *o) {
  extern char **environ;
  pid_t parent = getppid();
  if (o->socket == NULL || o->command == NULL || o->command[0] == NULL) {
    errno = 0;
    die("usage: switchboard-walls run SOCKET -- PROGRAM ARG...");
  }
  die_with_parent(parent); /* sandboxd killed: we die, the socket closes, the command dies */
  for (int i = 0; i < 3; i++) /* three real fds to pass, even if we were given fewer */
    if (fcntl(i, F_GETFD) < 0 && open("/dev/null", O_RDWR) != i)
      die("cannot open /dev/null");
  struct sockaddr_un a;
  memset(&a, 0, sizeof a);
  a.sun_family = AF_UNIX;
  if (strlen(o->socket) >= sizeof a.sun_path) {
    errno = 0;
    die("the spawner's socket path is too long: %s", o->socket);
  }
  strcpy(a.sun_path, o->socket);
  int s = socket(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0);
  if (s < 0 || connect(s, (struct sockaddr *)&a, sizeof a) < 0)
    die("the instance's spawner at %s does not answer (is the instance asleep?)", o->socket);
  size_t len = 0;
  char *body = walls_request_encode(o->command, environ, o->cwd, &len);
  if (body == NULL) {
    errno = 0;
    die("the command and its environment are over the spawner's limits (%d arguments, %d "
        "variables, %d bytes)", WALLS_MAX_ARGS, WALLS_MAX_ENV, WALLS_MAX_REQUEST);
  }
  int fds[3] = {0, 1, 2};
  long sent = walls_request_send(s, body, len, fds); /* a blocking socket: the rest follows */
  int ok = sent >= 0 && write_full(s, body + sent, len - (size_t)sent) == 0;
  free(body);
  if (!ok)
    die("cannot send the command to the instance's spawner");
  run_socket = s;
  struct sigaction sa;
  memset(&sa, 0, sizeof sa);
  sa.sa_handler = forward_signal; /* no SA_RESTART: the read below retries itself */
  sigaction(SIGTERM, &sa, NULL);
  sigaction(SIGINT, &sa, NULL);
  sigaction(SIGHUP, &sa, NULL);
  int status;
  if (read_full(s, &status, sizeof status) < 0) {
    fputs("walls: the instance ended while the command ran\n", stderr);
    signal(SIGKILL, SIG_DFL);
    kill(getpid(), SIGKILL);
  }
  return mirror_status(status);
}

/* ---- reap --------------------------------------------------------------------------------- */

/* Kills every member of one cgroup until it is empty, then removes it. Returns true when the
 * directory is gone. */
static bool reap_one(const char *dir) {
  char path[PATH_MAX];
  snprintf(path, sizeof path, "%s/cgroup.kill", dir);
  bool v2_kill = write_file(path, "1") == 0;
  snprintf(path, sizeof path, "%s/cgroup.procs", dir);
  for (int round = 0; round < REAP_ROUNDS; round++) {
    FILE *f = fopen(path, "re");
    if (f == NULL)
      return errno == ENOENT;
    long pid;
    int members = 0;
    while (fscanf(f, "%ld", &pid) == 1) {
      members++;
      if (!v2_kill)
        kill((pid_t)pid, SIGKILL);
    }
    fclose(f);
    if (members == 0 && rmdir(dir) == 0)
      return true;
    struct timespec ts = {0, 10 * 1000 * 1000};
    nanosleep(&ts, NULL);
  }
  return rmdir(dir) == 0 || errno == ENOENT;
}

static int reap(const options *o) {
  int failed = 0;
  for (int i = 0; i < o->cgroups.n; i++) {
    if (!reap_one(o->cgroups.items[i])) {
      fprintf(stderr, "walls: the cgroup %s could not be emptied and removed: %s\n",
              o->cgroups.items[i], strerror(errno));
      failed = 1;
    }
  }
  return failed ? EXIT_WALLS : 0;
}

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
