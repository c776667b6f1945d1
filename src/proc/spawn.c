/* Spawning (see spawn.h): options into argv/envp, PATH lookup, posix_spawn. */
#include "spawn.h"
#include "walls/request.h"

#include <errno.h>
#include <fcntl.h>
#include <lauxlib.h>
#include <limits.h>
#include <signal.h>
#include <spawn.h>
#include <stdlib.h>
#include <string.h>
#include <sys/syscall.h>
#include <sys/wait.h>
#include <unistd.h>

enum { MAX_ARGV = 100000 };

/* ---- reading the options ------------------------------------------------------------------ */

/* Reads opts.argv into a userdata array of pointers into the (anchored) argv table's strings.
 * Leaves the table and the array on the stack. */
static char *const *read_argv(lua_State *L, int opts) {
  lua_getfield(L, opts, "argv");
  int t = lua_gettop(L);
  luaL_argcheck(L, lua_istable(L, t), 1, "opts.argv must be an array of strings");
  lua_Integer n = luaL_len(L, t);
  luaL_argcheck(L, n >= 1 && n < MAX_ARGV, 1, "opts.argv must not be empty");
  const char **argv = lua_newuserdatauv(L, ((size_t)n + 1) * sizeof *argv, 0);
  for (lua_Integer i = 1; i <= n; i++) {
    size_t len;
    lua_rawgeti(L, t, i);
    const char *s = lua_type(L, -1) == LUA_TSTRING ? lua_tolstring(L, -1, &len) : NULL;
    if (s == NULL || strlen(s) != len)
      luaL_error(L, "opts.argv[%d] must be a string without NUL bytes", (int)i);
    argv[i - 1] = s; /* anchored by the argv table */
    lua_pop(L, 1);
  }
  argv[n] = NULL;
  return (char *const *)argv;
}

/* Reads opts.env into "NAME=value" Lua strings kept in a new table, and a userdata array of
 * pointers to them. Leaves the env table, the strings' table and the array on the stack. */
static char *const *read_env(lua_State *L, int opts) {
  lua_getfield(L, opts, "env");
  int t = lua_gettop(L);
  if (!lua_isnil(L, t) && !lua_istable(L, t))
    luaL_error(L, "opts.env must be a table of NAME = value strings");
  lua_newtable(L); /* the "NAME=value" strings, anchored */
  int strings = lua_gettop(L);
  lua_Integer n = 0;
  if (lua_istable(L, t)) {
    for (lua_pushnil(L); lua_next(L, t); lua_pop(L, 1)) {
      size_t kl = 0, vl = 0; /* set only for strings; clang cannot see the NULL checks */
      const char *k = lua_type(L, -2) == LUA_TSTRING ? lua_tolstring(L, -2, &kl) : NULL;
      const char *v = lua_type(L, -1) == LUA_TSTRING ? lua_tolstring(L, -1, &vl) : NULL;
      if (k == NULL || v == NULL || kl == 0 || strlen(k) != kl || strchr(k, '=') ||
          strlen(v) != vl)
        luaL_error(L, "opts.env: every entry must be NAME = value (strings, no '=' in the "
                      "name, no NUL bytes)");
      lua_pushvalue(L, -2);
      lua_pushliteral(L, "=");
      lua_pushvalue(L, -3);
      lua_concat(L, 3);
      lua_rawseti(L, strings, ++n);
    }
  }
  const char **envp = lua_newuserdatauv(L, ((size_t)n + 1) * sizeof *envp, 0);
  for (lua_Integer i = 1; i <= n; i++) {
    lua_rawgeti(L, strings, i);
    envp[i - 1] = lua_tostring(L, -1); /* anchored by the strings' table */
    lua_pop(L, 1);
  }
  envp[n] = NULL;
  return (char *const *)envp;
}

void sb_spawn_read(lua_State *L, int opts, sb_spawn_args *a) {
  opts = lua_absindex(L, opts);
  a->argv = read_argv(L, opts);
  a->envp = read_env(L, opts);
  lua_getfield(L, opts, "cwd");
  if (!lua_isnil(L, -1) && lua_type(L, -1) != LUA_TSTRING)
    luaL_error(L, "opts.cwd must be a directory path (a string)");
  size_t len = 0;
  a->cwd = lua_isnil(L, -1) ? NULL : lua_tolstring(L, -1, &len);
  if (a->cwd != NULL && strlen(a->cwd) != len)
    luaL_error(L, "opts.cwd must not contain a NUL byte");
}

/* ---- starting ------------------------------------------------------------------------------ */

/* Finds `name` in the PATH of the child's environment (not ours), as execvp would, writing the
 * path into out[PATH_MAX]. Returns 0 or an errno value. */
static int resolve_program(const char *name, char *const *envp, char *out) {
  if (strchr(name, '/') != NULL) {
    if (strlen(name) >= PATH_MAX)
      return ENAMETOOLONG;
    strcpy(out, name);
    return 0;
  }
  const char *path = "/usr/local/bin:/usr/bin:/bin";
  for (char *const *e = envp; *e; e++)
    if (strncmp(*e, "PATH=", 5) == 0)
      path = *e + 5;
  size_t nl = strlen(name);
  int err = ENOENT;
  for (const char *dir = path;; dir++) {
    const char *end = strchr(dir, ':');
    size_t dl = end ? (size_t)(end - dir) : strlen(dir);
    if (dl == 0) { /* an empty entry is the current directory */
      dir = ".";
      dl = 1;
    }
    if (dl + nl + 2 <= PATH_MAX) {
      memcpy(out, dir, dl);
      out[dl] = '/';
      memcpy(out + dl + 1, name, nl + 1);
      if (access(out, X_OK) == 0)
        return 0;
      if (errno == EACCES)
        err = EACCES;
    }
    if (end == NULL)
      break;
    dir = end;
  }
  return err;
}

static void close_fd(int *fd) {
  if (*fd >= 0)
    close(*fd);
  *fd = -1;
}

/* Whatever ends of a spawn's three pipes (stdin, stdout, stderr) are still open here: those
 * handed to the caller were set to -1 first. */
static void close_pipes(int in[2], int o[2], int e[2]) {
  close_fd(&in[0]);
  close_fd(&in[1]);
  close_fd(&o[0]);
  close_fd(&o[1]);
  close_fd(&e[0]);
  close_fd(&e[1]);
}

/* posix_spawn (vfork-fast) in a new session, with signals reset to their defaults (we ignore
 * SIGPIPE; a child must not inherit that). Returns 0 or an errno value. */
static int spawn_child(const char *program, const sb_spawn_args *a, int in, int out, int err,
                       pid_t *pid) {
  posix_spawn_file_actions_t fa;
  posix_spawnattr_t attr;
  posix_spawn_file_actions_init(&fa);
  posix_spawnattr_init(&attr);
  if (in >= 0)
    posix_spawn_file_actions_adddup2(&fa, in, 0);
  else
    posix_spawn_file_actions_addopen(&fa, 0, "/dev/null", O_RDONLY, 0);
  posix_spawn_file_actions_adddup2(&fa, out, 1);
  posix_spawn_file_actions_adddup2(&fa, err, 2);
  if (a->cwd != NULL)
    posix_spawn_file_actions_addchdir_np(&fa, a->cwd);
  /* Whatever the host program opened without O_CLOEXEC stays ours. */
  posix_spawn_file_actions_addclosefrom_np(&fa, 3);
  sigset_t all, none;
  sigfillset(&all);
  sigemptyset(&none);
  posix_spawnattr_setsigdefault(&attr, &all);
  posix_spawnattr_setsigmask(&attr, &none);
  posix_spawnattr_setflags(&attr, POSIX_SPAWN_SETSID | POSIX_SPAWN_SETSIGDEF |
                                      POSIX_SPAWN_SETSIGMASK);
  int rc = posix_spawn(pid, program, &fa, &attr, a->argv, a->envp);
  posix_spawn_file_actions_destroy(&fa);
  posix_spawnattr_destroy(&attr);
  return rc;
}

int sb_spawn_start(const sb_spawn_args *a, bool with_stdin, sb_spawned *out) {
  int in[2] = {-1, -1}, o[2] = {-1, -1}, e[2] = {-1, -1};
  pid_t pid = -1;
  int pidfd = -1;
  char program[PATH_MAX];
  int rc = resolve_program(a->argv[0], a->envp, program);
  if (rc != 0)
    goto done;
  if ((with_stdin && pipe2(in, O_CLOEXEC) != 0) || pipe2(o, O_CLOEXEC) != 0 ||
      pipe2(e, O_CLOEXEC) != 0) {
    rc = errno;
    goto done;
  }
  rc = spawn_child(program, a, in[0], o[1], e[1], &pid);
  if (rc != 0)
    goto done;
  pidfd = (int)syscall(SYS_pidfd_open, pid, 0);
  if (pidfd < 0) { /* cannot watch it: it must not run unwatched */
    rc = errno;
    kill(-pid, SIGKILL);
    while (waitpid(pid, NULL, 0) < 0 && errno == EINTR) {
    }
    goto done;
  }
  *out = (sb_spawned){pid, pidfd, in[1], o[0], e[0]};
  in[1] = o[0] = e[0] = -1; /* now the caller's */
done:
  /* The child's ends always; the parent's too unless they were handed over. */
  close_pipes(in, o, e);
  return rc;
}

/* A command without stdin reads /dev/null: one descriptor of it, opened at the first such
 * command and kept for the process's life (the link sends a copy of it), instead of an open and
 * a close per walled command (issue 43). Spawns run on the loop's thread only. -1 (errno set)
 * when it cannot be opened; a later command tries again. */
static int shared_dev_null(void) {
  static int fd = -1;
  if (fd < 0)
    fd = open("/dev/null", O_RDONLY | O_CLOEXEC);
  return fd;
}

int sb_spawn_walled(const sb_spawn_args *a, const char *socket_path, bool with_stdin,
                    sb_spawned *out, sb_link_member *member) {
  int in[2] = {-1, -1}, o[2] = {-1, -1}, e[2] = {-1, -1};
  size_t len = 0;
  char *body = NULL; /* owned until the end */
  int rc = 0;
  body = walls_request_encode(a->argv, a->envp, a->cwd ? a->cwd : "/workspace", &len);
  if (body == NULL) {
    rc = E2BIG;
    goto done;
  }
  /* without stdin the command reads the shared /dev/null: the spawner needs three fds */
  int stdin_fd = with_stdin ? (pipe2(in, O_CLOEXEC) == 0 ? in[0] : -1) : shared_dev_null();
  if (stdin_fd < 0 || pipe2(o, O_CLOEXEC) != 0 || pipe2(e, O_CLOEXEC) != 0) {
    rc = errno;
    goto done;
  }
  int fds[3] = {stdin_fd, o[1], e[1]};
  rc = sb_link_command(socket_path, body, len, fds, member);
  if (rc != 0)
    goto done;
  *out = (sb_spawned){0, -1, in[1], o[0], e[0]};
  in[1] = o[0] = e[0] = -1; /* now the caller's */
done:
  /* the child's ends are the spawner's now (or were never sent); ours unless handed over */
  close_pipes(in, o, e);
  free(body);
  return rc;
}
