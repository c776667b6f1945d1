/* core.fs: the unconfined helpers for the program's own trusted files (policies, state, the
 * workspace roots themselves), and the module opener. Paths here are followed as given — use
 * core.fs.root for anything an agent can write to. All functions are synchronous: the files are
 * small and these are a few system calls each; nothing here yields.
 *
 * read_file(path [, max_bytes]) → bytes | nil, err
 * write_file(path, bytes [, mode]) → true | nil, err     atomic (temp file, fsync, rename); the
 *                                                        parent must exist; a symlink at path is
 *                                                        replaced, not written through
 * mkdir_p(path [, mode = 0755]) → true | nil, err
 * mkdir_p_off_loop(path [, mode]) → true | nil, err       as mkdir_p; in a task the mkdirs run
 *                                                        on libuv's thread pool and the task
 *                                                        waits (it yields); elsewhere here
 * list(dir) → sorted names | nil, err
 * exists(path) → boolean                                 follows symlinks (a dangling one: false)
 * remove_tree(path) → true | nil, err                    never follows a symlink; missing: true.
 *                                                        In a task the walk runs on libuv's
 *                                                        thread pool and the task waits (a tree
 *                                                        of 10⁵ files takes seconds: the loop
 *                                                        must not stall); elsewhere (the main
 *                                                        chunk) it runs here
 * realpath(path) → absolute path | nil, err
 * reread(file) → bytes | nil                             the whole text of a Lua file handle
 *                                                        (io.open) held open, read again from
 *                                                        its start: pread, no seek, no stdio
 *                                                        buffer (sandboxd's held counters)
 *
 * err.kind: "not_found", "not_a_file", "too_large" or "io"; messages name the path. */
#ifndef _GNU_SOURCE
#define _GNU_SOURCE /* O_PATH */
#endif
#include "../engine/engine.h"
#include "../engine/list.h"
#include "fs.h"

#include <errno.h>
#include <fcntl.h>
#include <limits.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#define MAX_READ_LIMIT ((lua_Integer)1 << 53)

static int fail(lua_State *L, const char *op, const char *path, int code, long long size,
                size_t max) {
  char shown[512], msg[1024];
  sb_fs_display(shown, sizeof shown, path, strlen(path));
  const char *kind = "io";
  switch (code) {
  case ENOENT:
    kind = "not_found";
    snprintf(msg, sizeof msg, "%s %s: no such file or directory", op, shown);
    break;
  case EISDIR:
  case SB_FS_E_NOT_FILE:
    kind = "not_a_file";
    snprintf(msg, sizeof msg, "%s %s: not a regular file", op, shown);
    break;
  case SB_FS_E_TOO_LARGE:
    kind = "too_large";
    snprintf(msg, sizeof msg, "%s %s: %lld bytes, over the limit of %zu bytes", op, shown, size,
             max);
    break;
  case SB_FS_E_TOO_DEEP:
    snprintf(msg, sizeof msg, "%s %s: the tree is deeper than %d levels", op, shown,
             SB_FS_MAX_TREE_DEPTH);
    break;
  default:
    snprintf(msg, sizeof msg, "%s %s: %s", op, shown, strerror(code));
    break;
  }
  return sb_push_fail(L, kind, msg);
}

/* A path argument; NUL bytes are a programmer error here (these paths are the program's own). */
static const char *check_path(lua_State *L, int idx) {
  size_t len;
  const char *path = luaL_checklstring(L, idx, &len);
  luaL_argcheck(L, strlen(path) == len, idx, "path contains a NUL byte");
  luaL_argcheck(L, len > 0, idx, "empty path");
  luaL_argcheck(L, len < PATH_MAX, idx, "path too long");
  return path;
}

static mode_t check_mode(lua_State *L, int idx, mode_t dflt) {
  lua_Integer m = luaL_optinteger(L, idx, (lua_Integer)dflt);
  luaL_argcheck(L, m >= 0 && m <= 07777, idx, "mode must be permission bits");
  return (mode_t)m;
}

static int l_read_file(lua_State *L) {
  const char *path = check_path(L, 1);
  lua_Integer max = luaL_optinteger(L, 2, (lua_Integer)SB_FS_DEFAULT_MAX_READ);
  luaL_argcheck(L, max >= 0 && max <= MAX_READ_LIMIT, 2, "max_bytes must be a count of bytes");
  int fd = open(path, O_RDONLY | O_NONBLOCK | O_NOCTTY | O_CLOEXEC);
  if (fd < 0)
    return fail(L, "read_file", path, errno, 0, 0);
  long long size = 0;
  int rc = sb_fs_read_fd(L, fd, (size_t)max, &size);
  close(fd);
  if (rc != 0)
    return fail(L, "read_file", path, rc, size, (size_t)max);
  return 1;
}

static int l_write_file(lua_State *L) {
  const char *path = check_path(L, 1);
  size_t n;
  const char *data = luaL_checklstring(L, 2, &n);
  bool explicit_mode = !lua_isnoneornil(L, 3);
  mode_t mode = check_mode(L, 3, 0644);
  char dir[PATH_MAX];
  const char *slash = strrchr(path, '/');
  const char *base = slash != NULL ? slash + 1 : path;
  if (slash == NULL)
    strcpy(dir, ".");
  else if (slash == path)
    strcpy(dir, "/");
  else {
    memcpy(dir, path, (size_t)(slash - path));
    dir[slash - path] = '\0';
  }
  if (base[0] == '\0' || strcmp(base, ".") == 0 || strcmp(base, "..") == 0)
    return fail(L, "write_file", path, EISDIR, 0, 0);
  int dfd = open(dir, O_PATH | O_DIRECTORY | O_CLOEXEC);
  if (dfd < 0)
    return fail(L, "write_file", path, errno, 0, 0);
  struct stat st;
  int rc = 0;
  if (fstatat(dfd, base, &st, AT_SYMLINK_NOFOLLOW) == 0) {
    if (S_ISDIR(st.st_mode))
      rc = EISDIR;
    else if (!explicit_mode && S_ISREG(st.st_mode))
      mode = st.st_mode & 07777; /* keep an existing file's mode */
  }
  if (rc == 0)
    rc = sb_fs_write_atomic_at(dfd, base, data, n, mode, true);
  close(dfd);
  if (rc != 0)
    return fail(L, "write_file", path, rc, 0, 0);
  lua_pushboolean(L, 1);
  return 1;
}

/* Makes each prefix of buf (a writable copy of the path, len long) in turn; one that exists
 * must be a directory (or a link to one). 0, or the errno (ENOTDIR: a prefix is not one). */
static int mkdir_p_at(char *buf, size_t len, mode_t mode) {
  for (size_t i = 1; i <= len; i++) {
    if (buf[i] != '/' && buf[i] != '\0')
      continue;
    if (buf[i - 1] == '/')
      continue; /* "a//b" */
    char saved = buf[i];
    buf[i] = '\0';
    if (mkdir(buf, mode) < 0) {
      int err = errno;
      struct stat st;
      if (err != EEXIST || stat(buf, &st) < 0 || !S_ISDIR(st.st_mode)) {
        buf[i] = saved;
        return err == EEXIST ? ENOTDIR : err;
      }
    }
    buf[i] = saved;
  }
  return 0;
}

static int l_mkdir_p(lua_State *L) {
  const char *path = check_path(L, 1);
  mode_t mode = check_mode(L, 2, 0755);
  char buf[PATH_MAX];
  size_t len = strlen(path);
  memcpy(buf, path, len + 1);
  int rc = mkdir_p_at(buf, len, mode);
  if (rc != 0)
    return fail(L, "mkdir_p", path, rc, 0, 0);
  lua_pushboolean(L, 1);
  return 1;
}

static int l_list(lua_State *L) {
  const char *path = check_path(L, 1);
  int fd = open(path, O_RDONLY | O_DIRECTORY | O_CLOEXEC);
  if (fd < 0)
    return fail(L, "list", path, errno, 0, 0);
  int rc = sb_fs_push_sorted_names(L, fd);
  if (rc != 0)
    return fail(L, "list", path, rc, 0, 0);
  return 1;
}

static int l_exists(lua_State *L) {
  const char *path = check_path(L, 1);
  struct stat st;
  lua_pushboolean(L, stat(path, &st) == 0);
  return 1;
}

/* A removal (or a mkdir_p_off_loop) on the thread pool: the work touches nothing of Lua's; its
 * result is handed to the waiting task from the loop's thread. At shutdown the task is dropped
 * (no task is resumed then) and the work finishes on its own; the loop's last run waits for it. */
typedef struct off_loop_job {
  uv_work_t req;
  lua_State *task; /* NULL once shutdown dropped it */
  int rc;
  bool making; /* mkdir_p_off_loop, with mode; else remove_tree */
  mode_t mode;
  struct off_loop_job *prev, *next;
  char path[PATH_MAX];
} off_loop_job;

static off_loop_job *removals; /* in flight, for shutdown */

static void removal_work(uv_work_t *req) {
  off_loop_job *r = req->data;
  if (r->making)
    r->rc = mkdir_p_at(r->path, strlen(r->path), r->mode);
  else
    r->rc = sb_fs_remove_tree_at(AT_FDCWD, r->path);
}

static void removal_unlink(off_loop_job *r) { SB_LIST_REMOVE(removals, r); }

static void removal_done(uv_work_t *req, int status) {
  (void)status; /* never cancelled: uv_cancel is not used */
  off_loop_job *r = req->data;
  lua_State *task = r->task;
  if (task != NULL) {
    removal_unlink(r);
    int nargs;
    if (r->rc != 0) {
      nargs = fail(task, r->making ? "mkdir_p" : "remove_tree", r->path, r->rc, 0, 0);
    } else {
      lua_pushboolean(task, 1);
      nargs = 1;
    }
    free(r);
    sb_task_complete(task, nargs);
    return;
  }
  free(r);
}

static void removals_shutdown(void *ud) {
  (void)ud;
  while (removals != NULL) {
    off_loop_job *r = removals;
    removal_unlink(r);
    r->task = NULL; /* freed by removal_done when its walk ends */
  }
}

static int l_remove_tree(lua_State *L) {
  const char *path = check_path(L, 1);
  char buf[PATH_MAX];
  size_t len = strlen(path);
  memcpy(buf, path, len + 1);
  /* "link/" would resolve through the link: strip trailing slashes so the final component is
   * the link itself, which is unlinked, never followed. */
  while (len > 1 && buf[len - 1] == '/')
    buf[--len] = '\0';
  const char *slash = strrchr(buf, '/');
  const char *base = slash != NULL ? slash + 1 : buf;
  luaL_argcheck(L, strcmp(buf, "/") != 0, 1, "refusing to remove /");
  luaL_argcheck(L, strcmp(base, ".") != 0 && strcmp(base, "..") != 0, 1,
                "path must not end in . or ..");
  if (sb_task_running(L)) {
    off_loop_job *r = sb_calloc(L, 1, sizeof *r);
    memcpy(r->path, buf, len + 1);
    r->task = L;
    r->req.data = r;
    if (uv_queue_work(sb_loop(), &r->req, removal_work, removal_done) != 0) {
      free(r);
      return luaL_error(L, "remove_tree: cannot queue the removal");
    }
    SB_LIST_PUSH(removals, r);
    return sb_task_yield(L);
  }
  int rc = sb_fs_remove_tree_at(AT_FDCWD, buf);
  if (rc != 0)
    return fail(L, "remove_tree", path, rc, 0, 0);
  lua_pushboolean(L, 1);
  return 1;
}

/* mkdir_p on libuv's thread pool while the task waits: a directory made on a busy file system
 * costs the loop 0.1-0.5 ms of ext4's inode search each (a sandboxd start's workspace, 500 of
 * them in one burst: 56 ms of the loop's CPU, bench/README.md "Loop lag while 500 instances
 * start"). Outside a task it runs here, as mkdir_p. */
static int l_mkdir_p_off_loop(lua_State *L) {
  if (!sb_task_running(L))
    return l_mkdir_p(L);
  const char *path = check_path(L, 1);
  mode_t mode = check_mode(L, 2, 0755);
  off_loop_job *r = sb_calloc(L, 1, sizeof *r);
  memcpy(r->path, path, strlen(path) + 1);
  r->making = true;
  r->mode = mode;
  r->task = L;
  r->req.data = r;
  if (uv_queue_work(sb_loop(), &r->req, removal_work, removal_done) != 0) {
    free(r);
    return luaL_error(L, "mkdir_p_off_loop: cannot queue the work");
  }
  SB_LIST_PUSH(removals, r);
  return sb_task_yield(L);
}

static int l_realpath(lua_State *L) {
  const char *path = check_path(L, 1);
  char *resolved = realpath(path, NULL);
  if (resolved == NULL)
    return fail(L, "realpath", path, errno, 0, 0);
  lua_pushstring(L, resolved);
  free(resolved);
  return 1;
}

/* Kernel files (cgroup counters, /proc/<pid>/stat) give their whole text to one read that has
 * room for it, and a regular file's short read is its end: a read that does not fill the buffer
 * ends the text, so a held counter file costs one pread per look (it was a seek and two reads
 * through stdio, six times per walled command, issue 43). A text larger than the buffer is read
 * on until the end. nil when the read fails (a /proc entry whose process is gone). */
#define REREAD_CHUNK 4096
static int l_reread(lua_State *L) {
  luaL_Stream *f = luaL_checkudata(L, 1, LUA_FILEHANDLE);
  luaL_argcheck(L, f->closef != NULL && f->f != NULL, 1, "a closed file");
  int fd = fileno(f->f);
  luaL_Buffer b;
  luaL_buffinit(L, &b);
  off_t at = 0;
  for (;;) {
    char *room = luaL_prepbuffsize(&b, REREAD_CHUNK);
    ssize_t n = pread(fd, room, REREAD_CHUNK, at);
    if (n < 0 && errno == EINTR)
      continue;
    if (n < 0) {
      lua_pushnil(L);
      return 1;
    }
    luaL_addsize(&b, (size_t)n);
    at += n;
    if (n < REREAD_CHUNK)
      break;
  }
  luaL_pushresult(&b);
  return 1;
}

int sb_fs_open(lua_State *L) {
  static const luaL_Reg fns[] = {
      {"read_file", l_read_file},     {"write_file", l_write_file}, {"mkdir_p", l_mkdir_p},
      {"mkdir_p_off_loop", l_mkdir_p_off_loop},
      {"list", l_list},               {"exists", l_exists},         {"remove_tree", l_remove_tree},
      {"realpath", l_realpath},       {"reread", l_reread},         {NULL, NULL},
  };
  sb_shutdown_register(removals_shutdown, NULL);
  luaL_newlib(L, fns);
  sb_fs_root_fields(L);
  lua_setfield(L, -2, "fs");
  return 0;
}
