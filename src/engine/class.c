/* What every module's Lua face is built from, made one way (see engine.h): every C module that
 * hands Lua an object (a process, a server, a response, a root, a connection, a database, a
 * parser, a signal) registers its class with sb_class_register instead of writing its own
 * metatable and its own `__index` chain of strcmp; module tables, weak tables and memory that
 * raises when there is none are here too. */
#include "engine.h"

#include <stdlib.h>

/* __index(obj, key): the method table first (upvalue 1), then the computed fields
 * (upvalue 2), whose getter is called with the object. Anything else is nil. */
static int class_index(lua_State *L) {
  lua_settop(L, 2);
  lua_pushvalue(L, 2);
  if (lua_rawget(L, lua_upvalueindex(1)) != LUA_TNIL)
    return 1;
  lua_pushvalue(L, 2);
  if (lua_rawget(L, lua_upvalueindex(2)) == LUA_TNIL)
    return 1;
  lua_pushvalue(L, 1);
  lua_call(L, 1, 1);
  return 1;
}

static void push_funcs(lua_State *L, const luaL_Reg *fns) {
  lua_newtable(L);
  if (fns != NULL)
    luaL_setfuncs(L, fns, 0);
}

void sb_class_register(lua_State *L, const sb_class *cls) {
  if (luaL_newmetatable(L, cls->name)) {
    if (cls->meta != NULL)
      luaL_setfuncs(L, cls->meta, 0);
    push_funcs(L, cls->methods);
    if (cls->fields == NULL) { /* a plain table: the fastest __index there is */
      lua_setfield(L, -2, "__index");
    } else {
      push_funcs(L, cls->fields);
      lua_pushcclosure(L, class_index, 2);
      lua_setfield(L, -2, "__index");
    }
  }
  lua_pop(L, 1);
}

void sb_module_table(lua_State *L, const char *name, const luaL_Reg *fns) {
  if (lua_getfield(L, -1, name) != LUA_TTABLE) { /* core.http is shared by client and server */
    lua_pop(L, 1);
    lua_newtable(L);
    lua_pushvalue(L, -1);
    lua_setfield(L, -3, name);
  }
  luaL_setfuncs(L, fns, 0);
  lua_pop(L, 1);
}

void sb_push_weak_table(lua_State *L, const char *mode) {
  lua_newtable(L);
  lua_createtable(L, 0, 1);
  lua_pushstring(L, mode);
  lua_setfield(L, -2, "__mode");
  lua_setmetatable(L, -2);
}

void *sb_calloc(lua_State *L, size_t n, size_t size) {
  void *p = calloc(n, size);
  if (p == NULL)
    luaL_error(L, "out of memory");
  return p;
}
