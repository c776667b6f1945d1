/* The JSON primitives (docs/engine.md "JSON"): one lua-cjson instance for the whole program,
 * configured once, so every module reads and writes JSON the same way (issue 42: three cjson
 * flavours and ~22 pcalls around a decode before).
 *
 * core.json.decode(text) → value, or nil and an `invalid` error naming what is wrong: bytes from
 * the network are expected to be wrong sometimes, so that is a failure value, not a raise.
 * Strict JSON only (no NaN, Infinity or hex numbers); nesting past 1,000 levels is refused.
 * core.json.encode(value) → text; a value that is no JSON (a function, a NaN, an excessively
 * sparse array) is a programmer error and raises. core.json.null is JSON's null.
 *
 * core.json_string(s) → literal, valid: s as a JSON string literal (quotes included), escaped
 * and with every byte that does not start a valid UTF-8 sequence replaced by U+FFFD, in one pass
 * and one buffer; valid is false when something was replaced. sandboxd's answer carries a
 * command's output this way: a megabyte is one scan and one copy, not a UTF-8 check in Lua, a
 * lossy rebuild and cjson's encoding (issue 28). */
#include "json.h"
#include "json_text.h"

#include "../engine/engine.h"

#include <lauxlib.h>

/* lua-cjson 2.1 (Debian's lua5.4-cjson): each call makes a fresh instance with its own
 * configuration, so the engine's settings never leak into a `require("cjson")` elsewhere. */
int luaopen_cjson(lua_State *L);

static void emit(void *ctx, const char *bytes, size_t len) {
  if (len > 0)
    luaL_addlstring((luaL_Buffer *)ctx, bytes, len);
}

static int l_json_string(lua_State *L) {
  size_t n;
  const char *s = luaL_checklstring(L, 1, &n);
  luaL_Buffer b;
  luaL_buffinitsize(L, &b, n + n / 16 + 16); /* most output needs few escapes: one allocation */
  bool valid = sb_json_string(s, n, emit, &b);
  luaL_pushresult(&b);
  lua_pushboolean(L, valid);
  return 2;
}

/* Upvalue 1: the instance's own decode, which raises on bad input; its raise becomes the value. */
static int l_decode(lua_State *L) {
  luaL_checkstring(L, 1);
  lua_settop(L, 1);
  lua_pushvalue(L, lua_upvalueindex(1));
  lua_insert(L, 1);
  if (lua_pcall(L, 1, 1, 0) == LUA_OK)
    return 1;
  const char *why = lua_tostring(L, -1);
  return sb_push_fail(L, "invalid", lua_pushfstring(L, "invalid JSON: %s", why ? why : "?"));
}

/* Calls instance.name(arg) for a setting. */
static void configure(lua_State *L, const char *name, int arg) {
  lua_getfield(L, -1, name);
  lua_pushinteger(L, arg);
  lua_call(L, 1, 0);
}

/* Builds core.json from a fresh instance on the top of the stack. */
static void push_json_table(lua_State *L) {
  lua_pushcfunction(L, luaopen_cjson);
  lua_call(L, 0, 1);
  lua_getfield(L, -1, "decode_invalid_numbers");
  lua_pushboolean(L, 0); /* NaN, Infinity and hex are not JSON */
  lua_call(L, 1, 0);
  configure(L, "decode_max_depth", 1000);
  configure(L, "encode_max_depth", 1000);
  lua_createtable(L, 0, 3);
  lua_getfield(L, -2, "decode");
  lua_pushcclosure(L, l_decode, 1);
  lua_setfield(L, -2, "decode");
  lua_getfield(L, -2, "encode");
  lua_setfield(L, -2, "encode");
  lua_getfield(L, -2, "null");
  lua_setfield(L, -2, "null");
  lua_remove(L, -2); /* the instance: only its functions are kept */
}

int sb_json_open(lua_State *L) {
  lua_pushcfunction(L, l_json_string);
  lua_setfield(L, -2, "json_string");
  push_json_table(L);
  lua_setfield(L, -2, "json");
  return 0;
}
