/* See lua_harness.h. */
#include "lua_harness.h"

#include "lua_coverage.h"

#include <lauxlib.h>
#include <lua.h>
#include <lualib.h>
#include <stdio.h>
#include <stdlib.h>

#ifndef SB_LUA_DIR
#error "SB_LUA_DIR must name the program's Lua directory"
#endif

int luaopen_switchboard_core(lua_State *L);
int luaopen_cjson(lua_State *L);

static lua_State *L;
static int fn_ref = LUA_NOREF;
static const char *target = "fuzz";

static void preload(lua_State *S, const char *name, lua_CFunction open) {
  luaL_getsubtable(S, LUA_REGISTRYINDEX, LUA_PRELOAD_TABLE);
  lua_pushcfunction(S, open);
  lua_setfield(S, -2, name);
  lua_pop(S, 1);
}

/* package.path begins with the program's Lua directory, so a harness requires its modules. */
static void lua_dir_first(lua_State *S) {
  lua_getglobal(S, "package");
  lua_pushfstring(S, "%s/?.lua;%s/?/init.lua;", SB_LUA_DIR, SB_LUA_DIR);
  lua_getfield(S, -2, "path");
  lua_concat(S, 2);
  lua_setfield(S, -2, "path");
  lua_pop(S, 1);
}

int sb_fuzz_lua_load(const char *name, const char *harness, size_t len) {
  target = name;
  L = luaL_newstate();
  luaL_openlibs(L);
  sb_lua_coverage_attach(L); /* libFuzzer sees the Lua lines each input reaches */
  preload(L, "switchboard.core", luaopen_switchboard_core);
  preload(L, "cjson", luaopen_cjson);
  lua_dir_first(L);
  char chunk[64];
  snprintf(chunk, sizeof chunk, "=%s", name);
  if (luaL_loadbuffer(L, harness, len, chunk) != LUA_OK) {
    fprintf(stderr, "%s: %s\n", name, lua_tostring(L, -1));
    abort();
  }
  lua_pushstring(L, SB_LUA_DIR);
  if (lua_pcall(L, 1, 1, 0) != LUA_OK) {
    fprintf(stderr, "%s: the harness does not load: %s\n", name, lua_tostring(L, -1));
    abort();
  }
  fn_ref = luaL_ref(L, LUA_REGISTRYINDEX);
  return 0;
}

int sb_fuzz_lua_input(const uint8_t *data, size_t size) {
  lua_rawgeti(L, LUA_REGISTRYINDEX, fn_ref);
  lua_pushlstring(L, (const char *)data, size);
  if (lua_pcall(L, 1, 0, 0) != LUA_OK) {
    fprintf(stderr, "%s: %s\n", target, lua_tostring(L, -1));
    abort();
  }
  lua_gc(L, LUA_GCSTEP, 0);
  return 0;
}
