/* core.secrets: how a server keeps its secrets to itself (docs/isolation.md).
 *
 *   core.secrets.take_env(name) → value | nil   reads a variable once and removes it from this
 *                                               process's environment (so /proc/<pid>/environ,
 *                                               a child that inherits environ, and a later
 *                                               getenv no longer hold it)
 *   core.secrets.not_dumpable() → true | nil, err  prctl(PR_SET_DUMPABLE, 0): no core dump,
 *                                               /proc/<pid>/{mem,environ,maps,fd} owned by root
 *                                               and closed to ptrace by the same uid */
#include "secrets.h"

#include <lauxlib.h>

#include <errno.h>
#include <stdlib.h>
#include <string.h>
#include <sys/prctl.h>

static int l_take_env(lua_State *L) {
  const char *name = luaL_checkstring(L, 1);
  const char *value = getenv(name);
  if (value == NULL) {
    lua_pushnil(L);
    return 1;
  }
  lua_pushstring(L, value); /* a Lua copy; the environ entry is dropped below */
  size_t n = strlen(value);
  /* The bytes of the environ block the kernel shows in /proc/<pid>/environ are the ones the
   * process started with: overwrite them in place before unsetting, or they stay readable. */
  memset((char *)value, 0, n);
  unsetenv(name);
  return 1;
}

static int l_not_dumpable(lua_State *L) {
  if (prctl(PR_SET_DUMPABLE, 0, 0, 0, 0) != 0) {
    lua_pushnil(L);
    lua_pushstring(L, strerror(errno));
    return 2;
  }
  lua_pushboolean(L, 1);
  return 1;
}

int sb_secrets_open(lua_State *L) {
  static const luaL_Reg fns[] = {
      {"take_env", l_take_env}, {"not_dumpable", l_not_dumpable}, {NULL, NULL}};
  luaL_newlib(L, fns);
  lua_setfield(L, -2, "secrets");
  return 0;
}
