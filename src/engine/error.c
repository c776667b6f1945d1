/* The one error type (see engine.h): core.error(kind, message [, fields]), core.is_error(v),
 * and sb_error_push for C modules. The metatable lives in the registry under ERROR_MT, so every
 * coroutine and every module creates the same kind of object. */
#include "engine.h"
#include "engine_internal.h"

#include <string.h>

#define ERROR_MT "switchboard.error"

/* Pushes the message to use for `kind`: `message` unless it is NULL or empty. */
static void push_message(lua_State *L, const char *kind, const char *message, size_t len) {
  if (message != NULL && len > 0)
    lua_pushlstring(L, message, len);
  else
    lua_pushfstring(L, "(%s error without a message)", kind);
}

int sb_error_push(lua_State *L, const char *kind, const char *message) {
  lua_createtable(L, 0, 4);
  luaL_setmetatable(L, ERROR_MT);
  lua_pushstring(L, kind);
  lua_setfield(L, -2, "kind");
  push_message(L, kind, message, message != NULL ? strlen(message) : 0);
  lua_setfield(L, -2, "message");
  return 1;
}

int sb_push_fail(lua_State *L, const char *kind, const char *message) {
  lua_pushnil(L);
  return 1 + sb_error_push(L, kind, message);
}

bool sb_is_error(lua_State *L, int idx) {
  if (!lua_getmetatable(L, idx))
    return false;
  luaL_getmetatable(L, ERROR_MT);
  bool same = lua_rawequal(L, -1, -2);
  lua_pop(L, 2);
  return same;
}

/* core.error(kind, message [, fields]): fields are copied first, so kind and message always
 * come from the arguments. */
static int l_error(lua_State *L) {
  const char *kind = luaL_checkstring(L, 1);
  size_t len = 0;
  const char *message = luaL_optlstring(L, 2, NULL, &len);
  if (!lua_isnoneornil(L, 3))
    luaL_checktype(L, 3, LUA_TTABLE);
  lua_settop(L, 3);
  lua_createtable(L, 0, 4);
  if (!lua_isnil(L, 3)) {
    for (lua_pushnil(L); lua_next(L, 3) != 0;) {
      lua_pushvalue(L, -2);
      lua_insert(L, -2);
      lua_rawset(L, 4);
    }
  }
  lua_pushvalue(L, 1);
  lua_setfield(L, 4, "kind");
  push_message(L, kind, message, len);
  lua_setfield(L, 4, "message");
  luaL_setmetatable(L, ERROR_MT);
  return 1;
}

static int l_is_error(lua_State *L) {
  luaL_checkany(L, 1);
  lua_pushboolean(L, sb_is_error(L, 1));
  return 1;
}

/* tostring(err) is its message (a message made non-string later falls back to the kind). */
static int l_tostring(lua_State *L) {
  if (lua_getfield(L, 1, "message") == LUA_TSTRING && lua_rawlen(L, -1) > 0)
    return 1;
  lua_getfield(L, 1, "kind");
  lua_pushfstring(L, "(%s error without a message)", luaL_optstring(L, -1, "unknown"));
  return 1;
}

int sb_error_open(lua_State *L) {
  static const luaL_Reg meta[] = {{"__tostring", l_tostring}, {NULL, NULL}};
  static const luaL_Reg fns[] = {{"error", l_error}, {"is_error", l_is_error}, {NULL, NULL}};
  if (luaL_newmetatable(L, ERROR_MT)) /* a table's metatable: no methods, no __index */
    luaL_setfuncs(L, meta, 0);
  lua_pop(L, 1);
  luaL_setfuncs(L, fns, 0);
  return 0;
}
