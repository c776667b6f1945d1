/* SIGHUP, SIGTERM, SIGINT and SIGWINCH (a terminal's resize) on the loop. core.on_signal(name,
 * fn) runs fn in a new task each time the signal arrives. A signal is watched from the first
 * on_signal call naming it; a watched TERM or INT whose handler was removed asks the engine to
 * exit 0: the loop stops, core.run returns, and the shutdown (which kills every live process
 * group) runs after uv_run returned — never from inside this callback, since libuv's loop is
 * not reentrant. The handles are unreferenced so that listening never keeps the loop alive. */
#include "engine.h"
#include "engine_internal.h"
#include "../log/log.h"

#include <signal.h>
#include <string.h>

static struct {
  const char *name;
  int signo;
  uv_signal_t handle;
  int handler_ref;
  bool started;
} watched[] = {
    {"HUP", SIGHUP, {0}, LUA_NOREF, false},
    {"TERM", SIGTERM, {0}, LUA_NOREF, false},
    {"INT", SIGINT, {0}, LUA_NOREF, false},
    {"WINCH", SIGWINCH, {0}, LUA_NOREF, false},
};
enum { N_WATCHED = sizeof watched / sizeof watched[0] };

static void signal_arrived(uv_signal_t *h, int signo) {
  (void)signo;
  size_t i = (size_t)(uintptr_t)h->data;
  lua_State *L = sb_main_state();
  sb_log_field f[] = {{"signal", watched[i].name, false}};
  /* a resize comes in bursts while a window is dragged: not worth an info line each */
  sb_log_write(watched[i].signo == SIGWINCH ? "debug" : "info", "signal.received", f, 1);
  if (watched[i].handler_ref == LUA_NOREF) {
    if (watched[i].signo == SIGTERM || watched[i].signo == SIGINT)
      sb_engine_request_exit(0);
    return;
  }
  /* core.go(handler) through the Lua API keeps one path for task creation. */
  lua_getfield(L, LUA_REGISTRYINDEX, "switchboard.core");
  lua_getfield(L, -1, "go");
  lua_remove(L, -2);
  lua_rawgeti(L, LUA_REGISTRYINDEX, watched[i].handler_ref);
  lua_pushstring(L, watched[i].name);
  sb_pcall(L, 2, "signal handler");
}

static int l_on_signal(lua_State *L) {
  const char *name = luaL_checkstring(L, 1);
  if (!lua_isnil(L, 2))
    luaL_checktype(L, 2, LUA_TFUNCTION);
  for (size_t i = 0; i < N_WATCHED; i++) {
    if (strcmp(name, watched[i].name) != 0)
      continue;
    if (!watched[i].started) { /* watch only what a program asked for */
      uv_signal_init(sb_loop(), &watched[i].handle);
      watched[i].handle.data = (void *)(uintptr_t)i;
      uv_signal_start(&watched[i].handle, signal_arrived, watched[i].signo);
      uv_unref((uv_handle_t *)&watched[i].handle);
      watched[i].started = true;
    }
    luaL_unref(L, LUA_REGISTRYINDEX, watched[i].handler_ref);
    lua_pushvalue(L, 2);
    watched[i].handler_ref = lua_isnil(L, 2) ? (lua_pop(L, 1), LUA_NOREF)
                                             : luaL_ref(L, LUA_REGISTRYINDEX);
    return 0;
  }
  return luaL_argerror(L, 1, "\"HUP\", \"TERM\", \"INT\" or \"WINCH\" expected");
}

int sb_os_signals_open(lua_State *L) {
  lua_pushcfunction(L, l_on_signal);
  lua_setfield(L, -2, "on_signal");
  return 0;
}
