/* core.fs.root(dir): file access confined to a directory, for workspaces whose contents an
 * agent controls (the local executor's files, the sandbox server's /read and /write).
 *
 * Every path is resolved by the kernel with openat2(2) RESOLVE_BENEATH | RESOLVE_NO_MAGICLINKS
 * relative to an O_PATH fd of the root, in one call: a `..` above the root, an absolute path
 * and a symlink whose target leaves the root are refused (EXDEV), not followed; symlinks that
 * stay inside are followed. Creating and replacing happen with *at() calls relative to a
 * directory fd that was itself resolved beneath the root, so a name swapped for a symlink
 * between two steps is never followed out. Without openat2 (Linux < 5.6) `root` refuses to
 * open rather than fall back to an unsafe resolution.
 *
 * All methods are synchronous: workspace files are small and a read or write is a handful of
 * system calls; nothing here yields. Error messages name the path as the caller gave it and say
 * what to do, and never contain the host path of the root.
 *
 * core.fs.root(dir) → root | nil, err
 * root:read(path [, max_bytes = 64 MiB]) → bytes | nil, err
 * root:write(path, bytes [, {mode = 0644}]) → true | nil, err   parents created; atomic rename;
 *                                          an existing file keeps its mode unless one is given;
 *                                          a final symlink that stays inside is written through
 * root:stat(path) → {type, size, mode, mtime_ms} | nil, err     a final symlink is "link"
 * root:list([path = "."]) → sorted names | nil, err
 * root:remove(path [, {recursive = false}]) → true | nil, err   never follows a symlink
 * root:close() (also __gc and __close): in a task the fd is closed on libuv's thread pool
 *                                          (close_off_loop says why)
 *
 * err.kind: "escape" (a .. above the root, an absolute path, a symlink out, a magic link, a
 * symlink loop, a NUL byte), "not_found", "not_a_file", "too_large", "io". */
#ifndef _GNU_SOURCE
#define _GNU_SOURCE /* strchrnul */
#endif
#include "../engine/engine.h"
#include "fs.h"

#include <errno.h>
#include <fcntl.h>
#include <limits.h>
#include <linux/openat2.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/fsuid.h>
#include <sys/stat.h>
#include <sys/syscall.h>
#include <unistd.h>

#define ROOT_MT "switchboard.fs.root"
#define MAX_LINK_HOPS 40 /* symlinks write() follows at the final component, as the kernel */
#define MAX_READ_LIMIT ((lua_Integer)1 << 53)

typedef struct {
  int fd;       /* O_PATH|O_DIRECTORY|O_CLOEXEC; -1 once closed */
  int uid, gid; /* the owner every access is made as (setfsuid/setfsgid), or -1: the server */
} fs_root;

/* A walled sandbox instance's files are touched with its own host uid/gid (docs/isolation.md):
 * permission checks are its, files it gets are its own. setfsuid is per thread and this runs
 * on the loop thread only, between two calls that restore the server's ids. */
static void as_owner(const fs_root *r) {
  if (r->gid >= 0)
    setfsgid((gid_t)r->gid);
  if (r->uid >= 0)
    setfsuid((uid_t)r->uid);
}

static void as_server(const fs_root *r) {
  if (r->uid >= 0)
    setfsuid(geteuid());
  if (r->gid >= 0)
    setfsgid(getegid());
}

/* The one way this file resolves a path: beneath `dirfd`, no magic links, retrying the
 * EAGAIN openat2 returns when a concurrent rename could have let `..` escape. */
static int beneath(int dirfd, const char *path, int flags) {
  struct open_how how;
  memset(&how, 0, sizeof how);
  how.flags = (uint64_t)(flags | O_CLOEXEC);
  how.resolve = RESOLVE_BENEATH | RESOLVE_NO_MAGICLINKS;
  for (int tries = 0;; tries++) {
    long fd = syscall(SYS_openat2, dirfd, path, &how, sizeof how);
    if (fd >= 0)
      return (int)fd;
    if ((errno == EAGAIN && tries < 32) || errno == EINTR)
      continue;
    return -1;
  }
}

/* ---- paths -------------------------------------------------------------------------------- */

/* True when `path`, read lexically, goes above its starting directory or is absolute. Only used
 * to refuse early where directories would otherwise be created before the kernel refuses; the
 * kernel's resolution stays the authority everywhere. */
static bool lexically_escapes(const char *path) {
  if (path[0] == '/')
    return true;
  int depth = 0;
  const char *p = path;
  while (*p != '\0') {
    const char *end = strchrnul(p, '/');
    size_t n = (size_t)(end - p);
    if (n == 2 && p[0] == '.' && p[1] == '.') {
      if (--depth < 0)
        return true;
    } else if (n > 0 && !(n == 1 && p[0] == '.')) {
      depth++;
    }
    p = *end == '/' ? end + 1 : end;
  }
  return false;
}

/* Splits `path` (no trailing slash) into its directory, written to dir[PATH_MAX], and its last
 * component, returned (a pointer into `path`). */
static const char *split_path(const char *path, char *dir) {
  const char *slash = strrchr(path, '/');
  if (slash == NULL) {
    strcpy(dir, ".");
    return path;
  }
  if (slash == path) {
    strcpy(dir, "/"); /* absolute: the kernel refuses it with EXDEV */
  } else {
    memcpy(dir, path, (size_t)(slash - path));
    dir[slash - path] = '\0';
  }
  return slash + 1;
}

static bool is_dot_or_dotdot(const char *name) {
  return strcmp(name, ".") == 0 || strcmp(name, "..") == 0;
}

/* An O_PATH fd of directory `dir` resolved beneath the root, creating missing directories when
 * `create`: each prefix is resolved beneath the root, and a missing one is made with mkdirat()
 * in the fd of the prefix before it, then resolved beneath the root again. Returns -1 with
 * errno on failure. */
static int open_parent(int rootfd, const char *dir, bool create) {
  int fd = beneath(rootfd, dir, O_PATH | O_DIRECTORY);
  if (fd >= 0 || errno != ENOENT || !create)
    return fd;
  if (lexically_escapes(dir)) {
    errno = EXDEV;
    return -1;
  }
  char prefix[PATH_MAX];
  size_t plen = 0;
  int parent = beneath(rootfd, ".", O_PATH | O_DIRECTORY);
  if (parent < 0)
    return -1;
  const char *p = dir;
  while (*p != '\0') {
    const char *end = strchrnul(p, '/');
    size_t n = (size_t)(end - p);
    const char *next = *end == '/' ? end + 1 : end;
    if (n == 0 || (n == 1 && p[0] == '.')) {
      p = next;
      continue;
    }
    /* prefix += "/" + component; fits, since dir itself is shorter than PATH_MAX */
    if (plen > 0)
      prefix[plen++] = '/';
    memcpy(prefix + plen, p, n);
    plen += n;
    prefix[plen] = '\0';
    int child = beneath(rootfd, prefix, O_PATH | O_DIRECTORY);
    if (child < 0 && errno == ENOENT && !(n == 2 && p[0] == '.' && p[1] == '.')) {
      char name[NAME_MAX + 1];
      if (n > NAME_MAX) {
        errno = ENAMETOOLONG;
        goto fail;
      }
      memcpy(name, p, n);
      name[n] = '\0';
      /* mkdirat never follows a symlink at `name`; a dangling one makes it fail (EEXIST). */
      if (mkdirat(parent, name, 0755) < 0 && errno != EEXIST)
        goto fail;
      child = beneath(rootfd, prefix, O_PATH | O_DIRECTORY);
    }
    if (child < 0)
      goto fail;
    close(parent);
    parent = child;
    p = next;
  }
  return parent;

fail:;
  int err = errno;
  close(parent);
  errno = err;
  return -1;
}

/* ---- errors ------------------------------------------------------------------------------- */

/* Pushes `nil, err` for a failed `op` on `path` (as the caller gave it). */
static int fail(lua_State *L, const char *op, const char *path, size_t len, int code,
                long long size, size_t max) {
  char shown[512], msg[1024];
  sb_fs_display(shown, sizeof shown, path, len);
  const char *kind = "io";
  /* A path that climbs out lexically is an escape even when a component is missing (the
   * kernel stops at the missing component before it sees the climb). */
  if ((code == ENOENT || code == ENOTDIR) && memchr(path, '\0', len) == NULL &&
      lexically_escapes(path))
    code = EXDEV;
  switch (code) {
  case EXDEV:
  case ELOOP:
    kind = "escape";
    snprintf(msg, sizeof msg,
             "%s %s: refused, the path leaves the workspace (a '..' above its root, an absolute "
             "path, or a symlink pointing outside — or a symlink loop); use a path relative to "
             "the workspace that stays inside it",
             op, shown);
    break;
  case ENOENT:
    kind = "not_found";
    snprintf(msg, sizeof msg,
             "%s %s: no such file or directory in the workspace; check the path (list its "
             "directory to see what is there)",
             op, shown);
    break;
  case ENOTDIR:
    kind = "not_found";
    snprintf(msg, sizeof msg,
             "%s %s: a component of the path is a file, not a directory; check the path", op,
             shown);
    break;
  case EISDIR:
  case SB_FS_E_NOT_FILE:
    kind = "not_a_file";
    snprintf(msg, sizeof msg, "%s %s: not a regular file (%s); name a file", op, shown,
             code == EISDIR ? "a directory" : "a special file");
    break;
  case SB_FS_E_TOO_LARGE:
    kind = "too_large";
    snprintf(msg, sizeof msg,
             "%s %s: the file is %lld bytes, over the limit of %zu bytes; read a smaller file "
             "or raise max_bytes",
             op, shown, size, max);
    break;
  case ENOTEMPTY:
    snprintf(msg, sizeof msg,
             "%s %s: the directory is not empty; remove its contents first or pass "
             "{recursive = true}",
             op, shown);
    break;
  case SB_FS_E_TOO_DEEP:
    snprintf(msg, sizeof msg, "%s %s: the tree is deeper than %d levels; remove it in parts", op,
             shown, SB_FS_MAX_TREE_DEPTH);
    break;
  case EINVAL:
    snprintf(msg, sizeof msg, "%s %s: refused, the path names the workspace root itself", op,
             shown);
    break;
  default:
    snprintf(msg, sizeof msg, "%s %s: %s", op, shown, strerror(code));
    break;
  }
  return sb_push_fail(L, kind, msg);
}

/* ---- the handle --------------------------------------------------------------------------- */

static fs_root *check_root(lua_State *L) {
  fs_root *r = luaL_checkudata(L, 1, ROOT_MT);
  if (r->fd < 0)
    luaL_error(L, "the fs root is closed");
  return r;
}

/* The path argument at `idx`, or NULL after pushing `nil, err` for one no resolution should
 * see: a NUL byte (it would silently cut the path short) or longer than PATH_MAX. */
static const char *check_path(lua_State *L, int idx, const char *op, size_t *len, int *nret) {
  const char *path = luaL_checklstring(L, idx, len);
  if (strlen(path) != *len) {
    *nret = sb_push_fail(L, "escape", lua_pushfstring(L, "%s: refused, the path contains a NUL "
                                                         "byte; pass a path without one", op));
    return NULL;
  }
  if (*len >= PATH_MAX) {
    *nret = fail(L, op, path, *len, ENAMETOOLONG, 0, 0);
    return NULL;
  }
  return path;
}

/* root:read(path [, max_bytes]) → bytes | nil, err */
static int l_read(lua_State *L) {
  fs_root *r = check_root(L);
  size_t len;
  int nret;
  const char *path = check_path(L, 2, "read", &len, &nret);
  if (path == NULL)
    return nret;
  lua_Integer max = luaL_optinteger(L, 3, (lua_Integer)SB_FS_DEFAULT_MAX_READ);
  luaL_argcheck(L, max >= 0 && max <= MAX_READ_LIMIT, 3, "max_bytes must be a count of bytes");
  /* O_NONBLOCK: opening a fifo an agent left in its workspace must not hang the loop. */
  as_owner(r);
  int fd = beneath(r->fd, path, O_RDONLY | O_NONBLOCK | O_NOCTTY);
  int open_err = errno;
  as_server(r);
  if (fd < 0)
    return fail(L, "read", path, len, open_err, 0, 0);
  long long size = 0;
  int rc = sb_fs_read_fd(L, fd, (size_t)max, &size);
  close(fd);
  if (rc != 0)
    return fail(L, "read", path, len, rc, size, (size_t)max);
  return 1;
}

/* Writes `data` to `path` beneath the root; a symlink at the final component is followed when
 * it stays inside (by writing to its target path, resolved beneath the root again). */
static int confined_write(int rootfd, const char *path, const char *data, size_t n, int mode,
                          int hops) {
  char dir[PATH_MAX];
  size_t len = strlen(path);
  if (len == 0)
    return ENOENT;
  if (path[len - 1] == '/')
    return EISDIR;
  const char *base = split_path(path, dir);
  if (is_dot_or_dotdot(base))
    return lexically_escapes(path) ? EXDEV : EISDIR;
  int dfd = open_parent(rootfd, dir, true);
  if (dfd < 0)
    return errno;
  int rc = 0;
  struct stat st;
  if (fstatat(dfd, base, &st, AT_SYMLINK_NOFOLLOW) == 0) {
    if (S_ISLNK(st.st_mode)) {
      /* Follow it only if the kernel resolves it beneath the root (or it dangles inside). */
      int probe = beneath(rootfd, path, O_PATH);
      if (probe >= 0)
        close(probe);
      else if (errno != ENOENT) {
        rc = errno;
        goto done;
      }
      char target[PATH_MAX], next[PATH_MAX];
      ssize_t tn = readlinkat(dfd, base, target, sizeof target - 1);
      if (tn < 0) {
        rc = errno;
        goto done;
      }
      target[tn] = '\0';
      if (hops >= MAX_LINK_HOPS) {
        rc = ELOOP;
        goto done;
      }
      int w = target[0] == '/' ? snprintf(next, sizeof next, "%s", target)
                               : snprintf(next, sizeof next, "%s/%s", dir, target);
      if (w < 0 || (size_t)w >= sizeof next) {
        rc = ENAMETOOLONG;
        goto done;
      }
      close(dfd);
      return confined_write(rootfd, next, data, n, mode, hops + 1);
    }
    if (S_ISDIR(st.st_mode)) {
      rc = EISDIR;
      goto done;
    }
    if (!S_ISREG(st.st_mode)) {
      rc = SB_FS_E_NOT_FILE;
      goto done;
    }
    if (mode < 0)
      mode = (int)(st.st_mode & 0777); /* keep an existing file's mode (an executable script) */
  } else if (errno != ENOENT) {
    rc = errno;
    goto done;
  }
  rc = sb_fs_write_atomic_at(dfd, base, data, n, (mode_t)(mode < 0 ? 0644 : mode), false);

done:
  close(dfd);
  return rc;
}

/* root:write(path, bytes [, {mode = 0644}]) → true | nil, err */
static int l_write(lua_State *L) {
  fs_root *r = check_root(L);
  size_t len, n;
  int nret;
  const char *path = check_path(L, 2, "write", &len, &nret);
  if (path == NULL)
    return nret;
  const char *data = luaL_checklstring(L, 3, &n);
  int mode = -1; /* -1: an existing file keeps its mode, a new one gets 0644 */
  if (!lua_isnoneornil(L, 4)) {
    luaL_checktype(L, 4, LUA_TTABLE);
    if (lua_getfield(L, 4, "mode") != LUA_TNIL) {
      lua_Integer m = luaL_checkinteger(L, -1);
      luaL_argcheck(L, m >= 0 && m <= 0777, 4, "mode must be permission bits in [0, 0777]");
      mode = (int)m;
    }
    lua_pop(L, 1);
  }
  as_owner(r);
  int rc = confined_write(r->fd, path, data, n, mode, 0);
  as_server(r);
  if (rc != 0)
    return fail(L, "write", path, len, rc, 0, 0);
  lua_pushboolean(L, 1);
  return 1;
}

/* root:stat(path) → {type, size, mode, mtime_ms} | nil, err; a final symlink is reported as
 * type "link", not followed (intermediate ones are, beneath the root). */
static int l_stat(lua_State *L) {
  fs_root *r = check_root(L);
  size_t len;
  int nret;
  const char *path = check_path(L, 2, "stat", &len, &nret);
  if (path == NULL)
    return nret;
  int fd = beneath(r->fd, path, O_PATH | O_NOFOLLOW);
  if (fd < 0)
    return fail(L, "stat", path, len, errno, 0, 0);
  struct stat st;
  int rc = fstat(fd, &st) < 0 ? errno : 0;
  close(fd);
  if (rc != 0)
    return fail(L, "stat", path, len, rc, 0, 0);
  lua_createtable(L, 0, 4);
  lua_pushstring(L, sb_fs_type_name(st.st_mode));
  lua_setfield(L, -2, "type");
  lua_pushinteger(L, (lua_Integer)st.st_size);
  lua_setfield(L, -2, "size");
  lua_pushinteger(L, (lua_Integer)(st.st_mode & 07777));
  lua_setfield(L, -2, "mode");
  lua_pushinteger(L, (lua_Integer)st.st_mtim.tv_sec * 1000 + st.st_mtim.tv_nsec / 1000000);
  lua_setfield(L, -2, "mtime_ms");
  return 1;
}

/* root:list([path = "."]) → sorted array of names | nil, err */
static int l_list(lua_State *L) {
  fs_root *r = check_root(L);
  if (lua_isnoneornil(L, 2)) {
    lua_settop(L, 1);
    lua_pushliteral(L, ".");
  }
  size_t len;
  int nret;
  const char *path = check_path(L, 2, "list", &len, &nret);
  if (path == NULL)
    return nret;
  int fd = beneath(r->fd, path, O_RDONLY | O_DIRECTORY);
  if (fd < 0)
    return fail(L, "list", path, len, errno, 0, 0);
  int rc = sb_fs_push_sorted_names(L, fd);
  if (rc != 0)
    return fail(L, "list", path, len, rc, 0, 0);
  return 1;
}

/* root:remove(path [, {recursive = false}]) → true | nil, err. A symlink is removed itself,
 * never its target; a directory needs to be empty unless `recursive`, which deletes the tree
 * without following any symlink in it. */
static int l_remove(lua_State *L) {
  fs_root *r = check_root(L);
  size_t len;
  int nret;
  const char *path = check_path(L, 2, "remove", &len, &nret);
  if (path == NULL)
    return nret;
  bool recursive = false;
  if (!lua_isnoneornil(L, 3)) {
    luaL_checktype(L, 3, LUA_TTABLE);
    lua_getfield(L, 3, "recursive");
    recursive = lua_toboolean(L, -1);
    lua_pop(L, 1);
  }
  char trimmed[PATH_MAX], dir[PATH_MAX];
  memcpy(trimmed, path, len + 1);
  size_t tlen = len;
  while (tlen > 1 && trimmed[tlen - 1] == '/')
    trimmed[--tlen] = '\0';
  if (tlen == 0)
    return fail(L, "remove", path, len, ENOENT, 0, 0);
  const char *base = split_path(trimmed, dir);
  if (base[0] == '\0' || is_dot_or_dotdot(base))
    return fail(L, "remove", path, len, lexically_escapes(trimmed) ? EXDEV : EINVAL, 0, 0);
  int dfd = open_parent(r->fd, dir, false);
  if (dfd < 0)
    return fail(L, "remove", path, len, errno, 0, 0);
  int rc = 0;
  struct stat st;
  if (fstatat(dfd, base, &st, AT_SYMLINK_NOFOLLOW) < 0)
    rc = errno;
  else if (!S_ISDIR(st.st_mode))
    rc = unlinkat(dfd, base, 0) < 0 ? errno : 0;
  else if (recursive)
    rc = sb_fs_remove_tree_at(dfd, base);
  else
    rc = unlinkat(dfd, base, AT_REMOVEDIR) < 0 ? errno : 0;
  close(dfd);
  if (rc == EEXIST)
    rc = ENOTEMPTY;
  if (rc != 0)
    return fail(L, "remove", path, len, rc, 0, 0);
  lua_pushboolean(L, 1);
  return 1;
}

static void close_done(uv_fs_t *req) {
  uv_fs_req_cleanup(req);
  free(req);
}

/* In a task the fd is closed on libuv's thread pool, not on the loop. A walled instance's workspace is
 * a file system mounted only in its mount namespace: once the instance has ended, this O_PATH
 * fd is the mount's last reference, and the close(2) that drops it unmounts the file system
 * then and there, in the calling thread — ext4's sync, a cache flush and the block device's
 * invalidation, 5–90 ms each under load (perf sched on sandboxd, 500 instances: the longest
 * stretches the loop was held, issue 43). The loop's pending request keeps it running until
 * the close is done (the engine's shutdown runs the loop to the end of every request). Outside a
 * running task (a script, __gc, the engine gone) the close is made here: nothing would run the
 * loop to finish it, and a caller that counts its descriptors right after expects it closed. */
static void close_off_loop(lua_State *L, int fd) {
  uv_loop_t *loop = sb_task_running(L) ? sb_loop() : NULL;
  uv_fs_t *req = loop != NULL ? malloc(sizeof *req) : NULL;
  if (req != NULL && uv_fs_close(loop, req, fd, close_done) == 0)
    return;
  free(req);
  close(fd);
}

static int l_close(lua_State *L) {
  fs_root *r = luaL_checkudata(L, 1, ROOT_MT);
  if (r->fd >= 0) {
    close_off_loop(L, r->fd);
    r->fd = -1;
  }
  return 0;
}

static int l_tostring(lua_State *L) {
  fs_root *r = luaL_checkudata(L, 1, ROOT_MT);
  lua_pushstring(L, r->fd >= 0 ? "fs.root" : "fs.root (closed)"); /* no host path, on purpose */
  return 1;
}

/* core.fs.root(dir [, {uid, gid}]) → root | nil, err */
static int l_root(lua_State *L) {
  const char *dir = luaL_checkstring(L, 1);
  fs_root *r = lua_newuserdatauv(L, sizeof *r, 0);
  r->fd = -1;
  r->uid = r->gid = -1;
  if (lua_istable(L, 2)) { /* {uid =, gid =}: access as this owner (a walled instance's) */
    lua_getfield(L, 2, "uid");
    lua_getfield(L, 2, "gid");
    r->uid = (int)luaL_optinteger(L, -2, -1);
    r->gid = (int)luaL_optinteger(L, -1, -1);
    lua_pop(L, 2);
  }
  luaL_setmetatable(L, ROOT_MT);
  int fd = open(dir, O_PATH | O_DIRECTORY | O_CLOEXEC);
  if (fd < 0) {
    int err = errno;
    const char *kind = err == ENOENT ? "not_found" : err == ENOTDIR ? "not_a_file" : "io";
    return sb_push_fail(L, kind, lua_pushfstring(L, "fs.root %s: %s%s", dir, strerror(err),
                                                 err == ENOENT ? "; create the directory first"
                                                               : ""));
  }
  r->fd = fd;
  /* Probe openat2 once: confinement without it would be a silent hole, so refuse instead. */
  int probe = beneath(fd, ".", O_PATH | O_DIRECTORY);
  if (probe < 0) {
    int err = errno;
    const char *why = err == ENOSYS ? "openat2(2) is not available (Linux 5.6 or newer is "
                                      "needed for confined file access)"
                                    : strerror(err);
    return sb_push_fail(L, "io", lua_pushfstring(L, "fs.root %s: %s", dir, why));
  }
  close(probe);
  return 1;
}

void sb_fs_root_fields(lua_State *L) {
  static const luaL_Reg methods[] = {
      {"read", l_read},   {"write", l_write},   {"stat", l_stat},
      {"list", l_list},   {"remove", l_remove}, {"close", l_close},
      {NULL, NULL},
  };
  static const luaL_Reg meta[] = {
      {"__gc", l_close}, {"__close", l_close}, {"__tostring", l_tostring}, {NULL, NULL}};
  sb_class_register(L, &(sb_class){ROOT_MT, methods, NULL, meta});
  static const luaL_Reg fns[] = {{"root", l_root}, {NULL, NULL}};
  luaL_setfuncs(L, fns, 0);
}
