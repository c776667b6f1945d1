/* `hold`: an instance from nothing to ready — cgroups joined, the workspace opened and mounted,
 * the spawner's socket bound, the outbound network's launcher forked, the drop to the instance's
 * uid, bwrap run — then, with --socket, the instance's spawner (spawner.c) for as long as the
 * instance lives. Each step is in its own file; this one says their order and why. */
#include <errno.h>
#include <fcntl.h>
#include <stdbool.h>
#include <stdio.h>
#include <string.h>
#include <sys/resource.h>
#include <sys/wait.h>
#include <unistd.h>

#include "walls/walls.h"

/* A directory bound read-only into the view (--ro-bind, --locale): opened (a directory, not a
 * symlink) at 10 or above, clear of the 3-5 bwrap takes, then staged where the instance's uid can
 * reach it (stage_reachable's slot). Dies naming the flag when it is not an absolute directory. */
static int open_bind(const options *o, const char *flag, const char *path, int slot) {
  int fd = path[0] == '/' ? open(path, O_RDONLY | O_DIRECTORY | O_NOFOLLOW | O_CLOEXEC) : -1;
  if (fd < 0 && path[0] != '/')
    errno = 0;
  int high = fd < 0 ? -1 : fcntl(fd, F_DUPFD_CLOEXEC, 10);
  if (fd >= 0)
    close(fd);
  if (high < 0)
    die("%s takes an absolute directory; cannot open '%s'", flag, path);
  return stage_reachable(o, high, path, slot);
}

/* A pipe holding `text` whole (--passwd, --group), for bwrap's --ro-bind-data: its read end at
 * 10 or above, close-on-exec until the child clears it for bwrap alone. The write end is closed
 * here, so bwrap reads the text and then its end. A few lines: far below a pipe's 64 KiB. */
static int text_pipe(const char *flag, const char *text) {
  int p[2] = {-1, -1}, high = -1;
  size_t n = strlen(text);
  if (n > 16384) {
    errno = 0;
    die("%s takes at most 16384 bytes", flag);
  }
  if (pipe2(p, O_CLOEXEC) < 0 || write(p[1], text, n) != (ssize_t)n ||
      (high = fcntl(p[0], F_DUPFD_CLOEXEC, 10)) < 0)
    die("cannot hand %s's text to bwrap", flag);
  close(p[0]);
  close(p[1]);
  return high;
}

int hold(const options *o) {
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
  int loop = -1; /* the workspace's loop device, told with "ready": the server gives it back */
  if (o->disk_image != NULL) { /* the instance's /workspace is then a file system of its own */
    ws = mount_disk(o, ws, &loop);
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
  for (int k = 0; k < o->ro_binds.n; k++)
    b.ro_fds[k] = open_bind(o, "--ro-bind", o->ro_binds.items[k], k + 1);
  /* --locale: only over the host's own /usr (a rootfs of its own has its own locales) */
  b.locale_fd = -1;
  if (o->locale != NULL && strcmp(o->rootfs, "/") == 0)
    b.locale_fd = open_bind(o, "--locale", o->locale, MAX_LIST + 1);
  /* --passwd, --group: likewise only over the host's own /etc (a rootfs's accounts are its own) */
  bool host_etc = strcmp(o->rootfs, "/") == 0;
  b.passwd_fd = host_etc && o->passwd != NULL ? text_pipe("--passwd", o->passwd) : -1;
  b.group_fd = host_etc && o->group != NULL ? text_pipe("--group", o->group) : -1;
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
    stdout_to_null(); /* bwrap and the init write nothing there (process.c) */
    for (int k = 0; k < o->ro_binds.n; k++)
      if (fcntl(b.ro_fds[k], F_SETFD, 0) < 0)
        _exit(EXIT_WALLS);
    if (b.locale_fd >= 0 && fcntl(b.locale_fd, F_SETFD, 0) < 0)
      _exit(EXIT_WALLS);
    if ((b.passwd_fd >= 0 && fcntl(b.passwd_fd, F_SETFD, 0) < 0) ||
        (b.group_fd >= 0 && fcntl(b.group_fd, F_SETFD, 0) < 0))
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
  if (b.locale_fd >= 0)
    close(b.locale_fd);
  if (b.passwd_fd >= 0)
    close(b.passwd_fd);
  if (b.group_fd >= 0)
    close(b.group_fd);
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
    if (loop >= 0)
      printf("ready %ld loop %d\n", inner, loop);
    else
      printf("ready %ld\n", inner);
    fflush(stdout);
    stdout_to_null(); /* sandboxd's end of the pipe closes: nothing is read after ready */
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
