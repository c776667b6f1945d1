/* bwrap's argv for an instance — its namespaces and its view: what of the host it sees, and
 * nothing else — and the one thing bwrap tells back, its child's host pid (--info-fd). */
#include <errno.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "walls/walls.h"

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
void build_bwrap(const options *o, bwrap_args *b) {
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
  /* The commands' HOME (policies/isolation.lua home): made in the private /tmp, owned by the
   * instance's uid, so tools that write under $HOME (caches, git config --global) can; the
   * host's HOME is never in view. Only directly under /tmp: nowhere else is writable and
   * outside the workspace (whose files publish commits). */
  if (o->home != NULL) {
    const char *leaf = o->home + strlen("/tmp/");
    if (strncmp(o->home, "/tmp/", strlen("/tmp/")) != 0 || leaf[0] == '\0' || leaf[0] == '.' ||
        strchr(leaf, '/') != NULL) {
      errno = 0;
      die("--home takes a directory directly under /tmp, not '%s'", o->home);
    }
    arg(b, "--perms"); arg(b, "0700");
    arg(b, "--dir"); arg(b, o->home);
  }
  /* After /tmp's tmpfs, so a directory below /tmp is not covered by it. */
  for (int i = 0; i < o->ro_binds.n; i++) {
    snprintf(b->ro_fd_text[i], sizeof b->ro_fd_text[i], "%d", b->ro_fds[i]);
    arg(b, "--ro-bind-fd"); arg(b, b->ro_fd_text[i]); arg(b, o->ro_binds.items[i]);
  }
  /* The locales the instance loads, from a directory the server made with a locale archive
   * (lua/switchboard/shell/locale_view.lua): where the host's /usr/lib/locale has none, glibc
   * opens every category's file of LANG's locale, ~60 system calls and ~120 us of CPU more in
   * every process that calls setlocale — every bash (issue 43). Same locales, one file. */
  if (b->locale_fd >= 0) {
    snprintf(b->locale_fd_text, sizeof b->locale_fd_text, "%d", b->locale_fd);
    arg(b, "--ro-bind-fd"); arg(b, b->locale_fd_text); arg(b, "/usr/lib/locale");
  }
  /* The instance's own account files (shell/child_env.lua): its uid's name and HOME, not the
   * host's accounts — `id -un` names the instance's user, and every bash's getpwuid parses
   * three lines instead of the host's whole file. bwrap copies each pipe's text to a file of
   * its own root (0644, as the host's are; bwrap's default would be 0600). */
  if (b->passwd_fd >= 0) {
    snprintf(b->passwd_fd_text, sizeof b->passwd_fd_text, "%d", b->passwd_fd);
    arg(b, "--perms"); arg(b, "0644");
    arg(b, "--ro-bind-data"); arg(b, b->passwd_fd_text); arg(b, "/etc/passwd");
  }
  if (b->group_fd >= 0) {
    snprintf(b->group_fd_text, sizeof b->group_fd_text, "%d", b->group_fd);
    arg(b, "--perms"); arg(b, "0644");
    arg(b, "--ro-bind-data"); arg(b, b->group_fd_text); arg(b, "/etc/group");
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
long read_child_pid(int fd) {
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
