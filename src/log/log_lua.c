/* The Lua face of logging (see log_lua.h): core.log, core.log_format, core.log_redact,
 * core.log_scrub. */
#include "log_lua.h"
#include "log.h"

#include <lauxlib.h>
#include <math.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

/* A whole number of tenths, as "%.14g" then ".0" write it, made by hand: the exec lane's
 * duration is one per request (issue 43). v is such a number when it is the double nearest to
 * k/10 for a whole k: then its 14 significant digits are k/10's own (v < 1e12: k has at most 13),
 * "%.14g" drops the zero tenth that the ".0" puts back, and v < 1e14 never takes an exponent.
 * False for any other v (and -0.0, whose text keeps its sign): printf writes it. */
static bool tenths_text(char *buf, size_t n, double v) {
  if (!(v >= 0 && v < 1e12) || signbit(v) || n < 24)
    return false;
  long long k = llround(v * 10);
  if ((double)k / 10 != v)
    return false;
  size_t len = sb_log_int_text(buf, k / 10);
  buf[len++] = '.';
  buf[len++] = (char)('0' + k % 10);
  buf[len] = '\0';
  return true;
}

void sb_log_float_text(char *buf, size_t n, double v) {
  _Static_assert(sizeof LUA_NUMBER_FMT == sizeof "%.14g", "tenths_text writes \"%.14g\"'s text");
  if (tenths_text(buf, n, v))
    return;
  snprintf(buf, n, LUA_NUMBER_FMT, (LUAI_UACNUMBER)v);
  if (buf[strspn(buf, "-0123456789")] == '\0') /* as lua_tostring: 3.0 */
    strncat(buf, ".0", n - strlen(buf) - 1);
}

static int cmp_keys(const void *a, const void *b) {
  return strcmp(((const sb_log_field *)a)->key, ((const sb_log_field *)b)->key);
}

/* core.log(level, event [, fields]): fields are sorted by key so lines compare stably. */
static int l_log(lua_State *L) {
  const char *level = luaL_checkstring(L, 1);
  const char *event = luaL_checkstring(L, 2);
  if (!sb_log_enabled(level))
    return 0; /* a filtered line costs no formatting */
  enum { MAX_FIELDS = 64 };
  sb_log_field fields[MAX_FIELDS];
  size_t n = 0;
  int base = lua_gettop(L);
  /* numbers and booleans are written here, strings are read in place: a line makes no Lua
   * string of its own (sandboxd logs one line per request: issue 43) */
  char numbers[MAX_FIELDS][48]; /* lua_tostring writes at most 44 */
  if (lua_istable(L, 3)) {
    luaL_checkstack(L, 2 * MAX_FIELDS + 8, "log fields");
    lua_pushnil(L);
    while (n < MAX_FIELDS && lua_next(L, 3) != 0) {
      if (lua_type(L, -2) != LUA_TSTRING) {
        lua_pop(L, 1);
        continue;
      }
      int t = lua_type(L, -1);
      const char *text;
      if (t == LUA_TBOOLEAN) {
        text = lua_toboolean(L, -1) ? "true" : "false";
      } else if (t == LUA_TNUMBER && lua_isinteger(L, -1)) {
        sb_log_int_text(numbers[n], (long long)lua_tointeger(L, -1)); /* LUA_INTEGER_FMT's text */
        text = numbers[n];
      } else if (t == LUA_TNUMBER) {
        sb_log_float_text(numbers[n], sizeof numbers[n], (double)lua_tonumber(L, -1));
        text = numbers[n];
      } else if (t == LUA_TSTRING) {
        text = lua_tostring(L, -1); /* anchored by the table */
      } else {
        luaL_tolstring(L, -1, NULL); /* a table's or function's text, anchored on the stack */
        lua_insert(L, base + 1);
        text = lua_tostring(L, base + 1);
      }
      fields[n++] = (sb_log_field){lua_tostring(L, -2), text, t == LUA_TNUMBER || t == LUA_TBOOLEAN};
      lua_pop(L, 1); /* the key (anchored by the table) stays for lua_next */
    }
  }
  qsort(fields, n, sizeof *fields, cmp_keys);
  sb_log_write(level, event, fields, n);
  lua_settop(L, base);
  return 0;
}

static int l_log_format(lua_State *L) {
  const char *format = luaL_checkstring(L, 1);
  luaL_argcheck(L, strcmp(format, "json") == 0 || strcmp(format, "text") == 0, 1,
                "\"json\" or \"text\" expected");
  sb_log_set_json(strcmp(format, "json") == 0);
  if (lua_isstring(L, 2))
    sb_log_set_min_level(lua_tostring(L, 2));
  return 0;
}

static int l_log_redact(lua_State *L) {
  sb_log_redact(luaL_checkstring(L, 1));
  return 0;
}

/* core.log_scrub(text) → text with every registered secret replaced by "[redacted]": the same
 * second line of defence for what Lua writes elsewhere (an agent run's transcript). */
static int l_log_scrub(lua_State *L) {
  size_t n, len;
  const char *text = luaL_checklstring(L, 1, &n);
  size_t at = sb_log_find_secret(text, n, 0, &len);
  if (at == n) {
    lua_settop(L, 1);
    return 1;
  }
  luaL_Buffer b;
  luaL_buffinit(L, &b);
  size_t from = 0;
  while (at < n) {
    luaL_addlstring(&b, text + from, at - from);
    luaL_addstring(&b, "[redacted]");
    from = at + len;
    at = sb_log_find_secret(text, n, from, &len);
  }
  luaL_addlstring(&b, text + from, n - from);
  luaL_pushresult(&b);
  return 1;
}

/* core.log_enabled(level) → whether a line of that level is written: a caller skips building
 * the fields of a line no one reads. */
static int l_log_enabled(lua_State *L) {
  lua_pushboolean(L, sb_log_enabled(luaL_checkstring(L, 1)));
  return 1;
}

int sb_log_open(lua_State *L) {
  static const luaL_Reg fns[] = {{"log_scrub", l_log_scrub},   {"log", l_log},
                                 {"log_enabled", l_log_enabled},
                                 {"log_format", l_log_format}, {"log_redact", l_log_redact},
                                 {NULL, NULL}};
  luaL_setfuncs(L, fns, 0);
  return 0;
}
