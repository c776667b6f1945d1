/* Drives the HTTP server through a Lua scenario (http_server_leak.lua) in an embedded state,
 * then tears down the way the binary does (sb_engine_shutdown, then lua_close) or, with
 * --module, the way a plain `lua` does with core.so (lua_close alone; the engine's finalizer
 * shuts down). Built with -DSB_SANITIZE=ON, LeakSanitizer checks at exit that nothing the
 * server allocated survives either path; elsewhere run it under valgrind. */
#include "engine/engine.h"

#include <lualib.h>
#include <stdio.h>
#include <string.h>

int luaopen_switchboard_core(lua_State *L);

int main(int argc, char **argv) {
  bool module = argc > 1 && strcmp(argv[1], "--module") == 0;
  int first = module ? 2 : 1;
  if (argc - first != 2) {
    fprintf(stderr, "usage: http_server_leak [--module] SCENARIO.lua HTTP_PROBE\n");
    return 2;
  }
  lua_State *L = luaL_newstate();
  luaL_openlibs(L);
  luaL_getsubtable(L, LUA_REGISTRYINDEX, LUA_PRELOAD_TABLE);
  lua_pushcfunction(L, luaopen_switchboard_core);
  lua_setfield(L, -2, "switchboard.core");
  lua_pop(L, 1);
  int status = luaL_loadfile(L, argv[first]);
  if (status == LUA_OK) {
    lua_pushstring(L, argv[first + 1]);
    status = lua_pcall(L, 1, 0, 0);
  }
  if (status != LUA_OK)
    fprintf(stderr, "http_server_leak: %s\n", lua_tostring(L, -1));
  if (!module)
    sb_engine_shutdown();
  lua_close(L);
  return status == LUA_OK ? 0 : 1;
}
