/* An instance's cgroups: made, limited and joined by the holder (and by `enter` per command),
 * and at the end emptied and removed (`reap`, which sandboxd runs after an instance's holder
 * has gone: whatever the instance left in them is killed). */
#include <errno.h>
#include <limits.h>
#include <signal.h>
#include <stdbool.h>
#include <stdio.h>
#include <string.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>
#include <fcntl.h>

#include "walls/walls.h"

/* Writes `value` to `path` (a cgroup control file). Returns 0 or -1 with errno. */
int write_file(const char *path, const char *value) {
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

void join_cgroups(const options *o, bool create) {
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
    if (members == 0) {
      /* cgroup v1's memory controller: the pages still charged to an empty cgroup (the page
       * cache its processes filled) keep it in the kernel after rmdir, a "dying" cgroup, until
       * reclaim finds them (40 instances that wrote 4 MB each: 40 still there 10 s after the
       * server's exit); emptied first, it goes with its rmdir. No such file in the other
       * controllers or on v2: the write fails and nothing changes. */
      snprintf(path, sizeof path, "%s/memory.force_empty", dir);
      (void)write_file(path, "0");
      snprintf(path, sizeof path, "%s/cgroup.procs", dir);
      if (rmdir(dir) == 0)
        return true;
    }
    struct timespec ts = {0, 10 * 1000 * 1000};
    nanosleep(&ts, NULL);
  }
  return rmdir(dir) == 0 || errno == ENOENT;
}

int reap(const options *o) {
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
