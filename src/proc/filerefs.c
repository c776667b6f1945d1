/* The host's file table and who holds it (docs/isolation.md "The host's file table").
 *
 * core.file_table() → allocated, max
 *     /proc/sys/fs/file-nr: the file objects (struct file) allocated host-wide, and fs.file-max.
 *     One small read: sandboxd's watchdog reads it every tick. nil, err when it cannot be read.
 *
 * core.file_refs(procs_files [, stop_at]) → { {files = n, processes = n, cut = bool} | false, ... }
 *     For each cgroup.procs file, the file references its processes hold: descriptors
 *     (/proc/PID/fd entries) plus file-backed mappings (/proc/PID/maps lines whose inode is not
 *     0). A mapping holds its file object after the descriptor is closed, so the descriptors
 *     alone (RLIMIT_NOFILE) say nothing of what a process holds of the table; a library mapped
 *     in several segments counts once per segment (an upper bound, never an under-count).
 *     stop_at: a group's count stops once past it (cut = true) — the caller only asks "over or
 *     not", and an attacker's 10⁵ mappings take ~1 µs each to read. false: the procs file could
 *     not be read (the cgroup is gone). A process that ends meanwhile counts what was read.
 *     In a task the reading runs on libuv's thread pool and the task waits (reading is per byte
 *     and proportional to the mappings: tens of ms per 60,000); elsewhere it runs here. */
#ifndef _GNU_SOURCE
#define _GNU_SOURCE
#endif
#include "filerefs.h"

#include "../engine/engine.h"
#include "../engine/list.h"

#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <lauxlib.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#define MAX_GROUPS 65536
#define PROCS_MAX_BYTES (16 << 20) /* a cgroup.procs of 10⁶ pids is 7 MB */

typedef struct {
  char *procs_file; /* owned */
  long long files;
  long long processes;
  bool ok;
  bool cut;
} group_count;

typedef struct refs_job {
  uv_work_t req;
  lua_State *task; /* NULL once shutdown dropped it */
  long long stop_at;
  size_t n;
  group_count *groups; /* n, owned */
  struct refs_job *prev, *next;
} refs_job;

static refs_job *jobs; /* in flight, for shutdown */

/* A whole small file into a malloc'd, NUL-terminated buffer (a /proc or cgroup file: read to
 * its end, whatever its stat says); NULL when it cannot be read. */
static char *read_all(const char *path, size_t max_bytes) {
  int fd = open(path, O_RDONLY | O_CLOEXEC);
  if (fd < 0)
    return NULL;
  size_t cap = 4096, len = 0;
  char *buf = malloc(cap);
  while (buf != NULL) {
    if (len + 1 >= cap) {
      char *bigger = cap * 2 > max_bytes ? NULL : realloc(buf, cap * 2);
      if (bigger == NULL) {
        free(buf);
        buf = NULL;
        break;
      }
      buf = bigger;
      cap *= 2;
    }
    ssize_t r = read(fd, buf + len, cap - len - 1);
    if (r < 0 && errno == EINTR)
      continue;
    if (r < 0) {
      free(buf);
      buf = NULL;
      break;
    }
    if (r == 0) {
      buf[len] = '\0';
      break;
    }
    len += (size_t)r;
  }
  close(fd);
  return buf;
}

static long long count_fds(long pid) {
  char path[64];
  snprintf(path, sizeof path, "/proc/%ld/fd", pid);
  DIR *d = opendir(path);
  if (d == NULL)
    return 0;
  long long n = 0;
  struct dirent *e;
  while ((e = readdir(d)) != NULL)
    if (e->d_name[0] != '.')
      n++;
  closedir(d);
  return n;
}

/* The maps lines whose 5th field (the inode) is not 0: "start-end perms offset dev inode path".
 * Read in chunks with the line's state carried across them; the path (field 6, which may hold
 * spaces) is skipped. Stops once past `stop_at` (the caller's bound, already less what the
 * group holds so far). */
static long long count_file_mappings(long pid, long long stop_at) {
  char path[64];
  snprintf(path, sizeof path, "/proc/%ld/maps", pid);
  int fd = open(path, O_RDONLY | O_CLOEXEC);
  if (fd < 0)
    return 0;
  static _Thread_local char buf[1 << 16];
  long long n = 0;
  int field = 0;
  bool in_space = false;
  unsigned long long inode = 0;
  for (;;) {
    ssize_t r = read(fd, buf, sizeof buf);
    if (r < 0 && errno == EINTR)
      continue;
    if (r <= 0)
      break;
    for (ssize_t i = 0; i < r; i++) {
      char c = buf[i];
      if (c == '\n') {
        if (field >= 4 && inode != 0)
          n++;
        field = 0;
        in_space = false;
        inode = 0;
      } else if (field < 5) {
        if (c == ' ') {
          if (!in_space)
            field++;
          in_space = true;
        } else {
          in_space = false;
          if (field == 4 && c >= '0' && c <= '9')
            inode = inode * 10 + (unsigned long long)(c - '0');
        }
      }
    }
    if (stop_at >= 0 && n > stop_at)
      break;
  }
  close(fd);
  return n;
}

static int pid_order(const void *a, const void *b) {
  long x = *(const long *)a, y = *(const long *)b;
  return (x > y) - (x < y);
}

/* One group: its pids (cgroup v1's cgroup.procs may repeat one: sorted and counted once). */
static void count_group(group_count *g, long long stop_at) {
  char *text = read_all(g->procs_file, PROCS_MAX_BYTES);
  long *pids = NULL;
  if (text == NULL)
    goto done;
  g->ok = true;
  size_t cap = 0, n = 0;
  for (char *p = text, *end; *p != '\0'; p = end) {
    long pid = strtol(p, &end, 10);
    if (end == p) {
      end = p + 1;
      continue;
    }
    if (n == cap) {
      cap = cap ? cap * 2 : 64;
      long *bigger = realloc(pids, cap * sizeof *pids);
      if (bigger == NULL)
        goto done; /* counts what it has: never more than there is */
      pids = bigger;
    }
    pids[n++] = pid;
  }
  if (n > 0)
    qsort(pids, n, sizeof *pids, pid_order);
  for (size_t i = 0; i < n; i++) {
    if (i > 0 && pids[i] == pids[i - 1])
      continue;
    g->processes++;
    g->files += count_fds(pids[i]);
    g->files += count_file_mappings(pids[i], stop_at < 0 ? -1 : stop_at - g->files);
    if (stop_at >= 0 && g->files > stop_at) {
      g->cut = true;
      break;
    }
  }
done:
  free(pids);
  free(text);
}

static void refs_work(uv_work_t *req) {
  refs_job *job = req->data;
  for (size_t i = 0; i < job->n; i++)
    count_group(&job->groups[i], job->stop_at);
}

static void job_free(refs_job *job) {
  for (size_t i = 0; i < job->n; i++)
    free(job->groups[i].procs_file);
  free(job->groups);
  free(job);
}

static void job_unlink(refs_job *job) { SB_LIST_REMOVE(jobs, job); }

static void push_counts(lua_State *L, const refs_job *job) {
  lua_createtable(L, (int)job->n, 0);
  for (size_t i = 0; i < job->n; i++) {
    const group_count *g = &job->groups[i];
    if (!g->ok) {
      lua_pushboolean(L, 0);
    } else {
      lua_createtable(L, 0, 3);
      lua_pushinteger(L, (lua_Integer)g->files);
      lua_setfield(L, -2, "files");
      lua_pushinteger(L, (lua_Integer)g->processes);
      lua_setfield(L, -2, "processes");
      lua_pushboolean(L, g->cut);
      lua_setfield(L, -2, "cut");
    }
    lua_rawseti(L, -2, (lua_Integer)i + 1);
  }
}

static void refs_done(uv_work_t *req, int status) {
  (void)status; /* never cancelled: uv_cancel is not used */
  refs_job *job = req->data;
  lua_State *task = job->task;
  if (task != NULL) {
    job_unlink(job);
    push_counts(task, job);
    job_free(job);
    sb_task_complete(task, 1);
    return;
  }
  job_free(job);
}

static void refs_shutdown(void *ud) {
  (void)ud;
  while (jobs != NULL) {
    refs_job *job = jobs;
    job_unlink(job);
    job->task = NULL; /* freed by refs_done when its reading ends */
  }
}

static int l_file_refs(lua_State *L) {
  luaL_checktype(L, 1, LUA_TTABLE);
  lua_Integer stop_at = luaL_optinteger(L, 2, -1);
  lua_Unsigned n = lua_rawlen(L, 1);
  luaL_argcheck(L, n <= MAX_GROUPS, 1, "too many groups");
  refs_job *job = sb_calloc(L, 1, sizeof *job);
  job->groups = calloc(n ? n : 1, sizeof *job->groups);
  if (job->groups == NULL) {
    free(job);
    return luaL_error(L, "out of memory");
  }
  job->stop_at = stop_at < 0 ? -1 : (long long)stop_at;
  for (lua_Unsigned i = 0; i < n; i++) {
    lua_rawgeti(L, 1, (lua_Integer)i + 1);
    const char *path = lua_tostring(L, -1);
    job->groups[i].procs_file = path != NULL ? strdup(path) : NULL;
    lua_pop(L, 1);
    job->n = i + 1;
    if (job->groups[i].procs_file == NULL) {
      job_free(job);
      return luaL_error(L, path == NULL ? "file_refs: group %d is not a path" : "out of memory",
                        (int)i + 1);
    }
  }
  job->req.data = job;
  if (sb_task_running(L)) {
    job->task = L;
    if (uv_queue_work(sb_loop(), &job->req, refs_work, refs_done) != 0) {
      job_free(job);
      return luaL_error(L, "file_refs: cannot queue the count");
    }
    SB_LIST_PUSH(jobs, job);
    return sb_task_yield(L);
  }
  refs_work(&job->req);
  push_counts(L, job);
  job_free(job);
  return 1;
}

static int l_file_table(lua_State *L) {
  char text[128];
  int fd = open("/proc/sys/fs/file-nr", O_RDONLY | O_CLOEXEC);
  ssize_t r = fd < 0 ? -1 : read(fd, text, sizeof text - 1);
  int err = errno;
  if (fd >= 0)
    close(fd);
  unsigned long long allocated, unused, max;
  if (r > 0) {
    text[r] = '\0';
    if (sscanf(text, "%llu %llu %llu", &allocated, &unused, &max) == 3) {
      lua_pushinteger(L, (lua_Integer)allocated);
      lua_pushinteger(L, (lua_Integer)max);
      return 2;
    }
  }
  lua_pushnil(L);
  lua_pushfstring(L, "/proc/sys/fs/file-nr could not be read (%s)", r < 0 ? strerror(err) : "bad text");
  return 2;
}

int sb_filerefs_open(lua_State *L) {
  sb_shutdown_register(refs_shutdown, NULL);
  static const luaL_Reg fns[] = {
      {"file_refs", l_file_refs}, {"file_table", l_file_table}, {NULL, NULL}};
  luaL_setfuncs(L, fns, 0);
  return 0;
}
