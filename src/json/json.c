/* core.json_string(s) → literal, valid: s as a JSON string literal (quotes included), escaped
 * and with every byte that does not start a valid UTF-8 sequence replaced by U+FFFD, in one pass
 * and one buffer; valid is false when something was replaced. sandboxd's answer carries a
 * command's output this way: a megabyte is one scan and one copy, not a UTF-8 check in Lua, a
 * lossy rebuild and cjson's encoding (issue 28). */
#include "json.h"
#include "json_text.h"

#include <lauxlib.h>

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

int sb_json_open(lua_State *L) {
  lua_pushcfunction(L, l_json_string);
  lua_setfield(L, -2, "json_string");
  return 0;
}
