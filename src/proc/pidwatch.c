/* core.pid_watch(pid): a process watched through a pidfd — whether it has ended, in one poll(2)
 * with no wait, however it ended and whoever's child it is.
 *
 * Why (issue 43): a walled instance is alive while its PID namespace's init is, and sandboxd
 * looked before and after every command by reading the init's /proc/<pid>/stat and matching its
 * state and start time — the kernel formats the whole stat line for it, and the two looks were
 * ~60 us of sandboxd's CPU on each request's critical path. A pidfd pins the exact process (a
 * reused pid is another process, never this one), and it polls readable once the process has
 * exited: a zombie or reaped alike, the two states the stat line's look treated as ended.
 *
 *   local w, err = core.pid_watch(pid)   → watch | nil, err (the process is gone, or no pidfd)
 *   w:exited()                           → true once the process has ended
 *   w:close()                            closes the pidfd (also on collection and <close>)
 *
 * The watch holds one descriptor, like the stat file it replaces. */
#include "pidwatch.h"

#include "../engine/engine.h"

#include <errno.h>
#include <lauxlib.h>
#include <poll.h>
#include <string.h>
#include <sys/syscall.h>
#include <unistd.h>

#define PID_WATCH "switchboard.core.pid_watch"

typedef struct {
  int fd; /* the pidfd; -1 once closed */
} pid_watch;

static pid_watch *check_watch(lua_State *L) { return luaL_checkudata(L, 1, PID_WATCH); }

static int l_pid_watch(lua_State *L) {
  lua_Integer pid = luaL_checkinteger(L, 1);
  luaL_argcheck(L, pid > 0, 1, "a process id");
  pid_watch *w = lua_newuserdatauv(L, sizeof *w, 0);
  w->fd = -1;
  luaL_setmetatable(L, PID_WATCH);
  int fd = (int)syscall(SYS_pidfd_open, (pid_t)pid, 0);
  if (fd < 0) {
    lua_pushnil(L);
    lua_pushfstring(L, "pidfd_open %d: %s", (int)pid, strerror(errno));
    return 2;
  }
  /* pidfd_open's descriptors are close-on-exec already: a spawned command never inherits it */
  w->fd = fd;
  return 1;
}

/* Readable (POLLIN) once the process has exited; a closed watch cannot say, and says ended. */
static int l_exited(lua_State *L) {
  pid_watch *w = check_watch(L);
  if (w->fd < 0) {
    lua_pushboolean(L, 1);
    return 1;
  }
  struct pollfd p = {w->fd, POLLIN, 0};
  int n;
  do
    n = poll(&p, 1, 0);
  while (n < 0 && errno == EINTR);
  lua_pushboolean(L, n > 0 && (p.revents & (POLLIN | POLLHUP | POLLERR)) != 0);
  return 1;
}

static int l_close(lua_State *L) {
  pid_watch *w = check_watch(L);
  if (w->fd >= 0) {
    close(w->fd);
    w->fd = -1;
  }
  return 0;
}

int sb_pidwatch_open(lua_State *L) {
  static const luaL_Reg methods[] = {{"exited", l_exited}, {"close", l_close}, {NULL, NULL}};
  static const luaL_Reg meta[] = {{"__gc", l_close}, {"__close", l_close}, {NULL, NULL}};
  sb_class_register(L, &(sb_class){PID_WATCH, methods, NULL, meta});
  lua_pushcfunction(L, l_pid_watch);
  lua_setfield(L, -2, "pid_watch");
  return 0;
}
