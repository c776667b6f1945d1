/* The switchboard binary: a Lua state with the engine preloaded, running the program's CLI
 * (lua/switchboard/cli.lua) as the first task. Exit status comes from the CLI. */
#include "core/core.h"
#include "engine/engine.h"
#include "install/lua_dir.h"

#include <limits.h>
#include <lualib.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>

#ifndef SB_LUA_DIR
#error "SB_LUA_DIR must name the program's Lua directory"
#endif

int luaopen_cjson(lua_State *L);

enum { EXIT_INTERNAL = 70 }; /* sysexits' EX_SOFTWARE: a bug, not a user error */

static const char bootstrap[] =
    "local lua_dir = ...\n"
    "package.path = lua_dir .. '/?.lua;' .. lua_dir .. '/?/init.lua;' .. package.path\n"
    "local core = require('switchboard.core')\n"
    "local cli = require('switchboard.cli')\n"
    "return core.run(cli.main, select(2, ...))\n";

static void preload(lua_State *L, const char *name, lua_CFunction open) {
  luaL_getsubtable(L, LUA_REGISTRYINDEX, LUA_PRELOAD_TABLE);
  lua_pushcfunction(L, open);
  lua_setfield(L, -2, name);
  lua_pop(L, 1);
}

static int run(lua_State *L) {
  int argc = (int)lua_tointeger(L, 1);
  char **argv = lua_touserdata(L, 2);
  if (luaL_loadbuffer(L, bootstrap, sizeof bootstrap - 1, "=bootstrap") != LUA_OK)
    return lua_error(L);
  char dir[PATH_MAX];
  lua_pushstring(L, sb_install_lua_dir(dir, sizeof dir, SB_LUA_DIR));
  luaL_checkstack(L, argc, "too many arguments");
  for (int i = 1; i < argc; i++)
    lua_pushstring(L, argv[i]);
  lua_call(L, argc, 1);
  return 1;
}

int main(int argc, char **argv) {
  signal(SIGPIPE, SIG_IGN); /* a closed socket is an error value, never a process death */
  lua_State *L = luaL_newstate();
  if (L == NULL) {
    fputs("switchboard: cannot create the Lua state (out of memory)\n", stderr);
    return EXIT_INTERNAL;
  }
  luaL_openlibs(L);
  preload(L, "switchboard.core", luaopen_switchboard_core);
  preload(L, "cjson", luaopen_cjson);
  lua_pushcfunction(L, run);
  lua_pushinteger(L, argc);
  lua_pushlightuserdata(L, argv);
  int status = EXIT_INTERNAL;
  if (lua_pcall(L, 2, 1, 0) != LUA_OK) {
    /* a string carries its traceback already; an engine error object carries it as a field */
    int traced = 0;
    if (lua_istable(L, -1)) {
      traced = lua_getfield(L, -1, "traceback") == LUA_TSTRING;
      if (!traced)
        lua_pop(L, 1); /* the field that was not a traceback */
    }
    fprintf(stderr, "switchboard: internal error: %s\n",
            traced ? lua_tostring(L, -1) : luaL_tolstring(L, -1, NULL));
  } else if (lua_isinteger(L, -1)) {
    status = (int)lua_tointeger(L, -1);
  } else {
    status = lua_toboolean(L, -1) || lua_isnil(L, -1) ? 0 : 1;
  }
  if (sb_engine_exit_status() >= 0) /* TERM/INT without a handler stopped core.run */
    status = sb_engine_exit_status();
  sb_engine_shutdown(); /* after uv_run returned: the loop is never re-entered */
  lua_close(L);
  return status;
}
