/* core.sse: the server-sent-events parser (sse.h) as a Lua object, for the model client.
 *
 *   local p = core.sse.parser(max_event_bytes)   -- bytes; default 8 MiB
 *   local events, err = p:feed(bytes)            -- {type1, data1, type2, data2, …} (flat, in
 *                                                -- order; empty when no event completed), or
 *                                                -- nil, {kind = "too_large" | "nomem", message}
 *   p:buffered()                                 -- bytes held for an unfinished event
 *   p.events                                     -- (via p:count()) events dispatched so far
 *
 * The flat list keeps the per-event cost to two strings: a streamed answer is hundreds of
 * small events. Nothing here yields. */
#include "sse_lua.h"
#include "../engine/engine.h"
#include "sse.h"

#include <stdio.h>

#define PARSER_MT "switchboard.sse.parser"
#define DEFAULT_MAX_EVENT_BYTES (8u << 20) /* bytes */

typedef struct {
  lua_State *L;
  int n; /* values pushed into the table at the top of L */
} collect;

static int on_event(void *ud, const char *type, size_t type_len, const char *data,
                    size_t data_len) {
  collect *c = ud;
  lua_pushlstring(c->L, type, type_len);
  lua_rawseti(c->L, -2, ++c->n);
  lua_pushlstring(c->L, data, data_len);
  lua_rawseti(c->L, -2, ++c->n);
  return 0;
}

static sb_sse *check_parser(lua_State *L) { return luaL_checkudata(L, 1, PARSER_MT); }

static int l_feed(lua_State *L) {
  sb_sse *p = check_parser(L);
  size_t n;
  const char *bytes = luaL_checklstring(L, 2, &n);
  lua_newtable(L);
  collect c = {L, 0};
  int rc = sb_sse_feed(p, bytes, n, on_event, &c);
  if (rc == SB_SSE_TOO_LARGE) {
    char msg[160];
    snprintf(msg, sizeof msg, "an event of the stream is larger than %zu bytes",
             p->max_event_bytes);
    return sb_push_fail(L, "too_large", msg);
  }
  if (rc == SB_SSE_NOMEM)
    return sb_push_fail(L, "nomem", "out of memory while parsing the event stream");
  return 1;
}

static int l_buffered(lua_State *L) {
  lua_pushinteger(L, (lua_Integer)sb_sse_buffered(check_parser(L)));
  return 1;
}

static int l_count(lua_State *L) {
  lua_pushinteger(L, (lua_Integer)check_parser(L)->events);
  return 1;
}

static int l_gc(lua_State *L) {
  sb_sse_free(check_parser(L));
  return 0;
}

static int l_parser(lua_State *L) {
  lua_Integer max = luaL_optinteger(L, 1, DEFAULT_MAX_EVENT_BYTES);
  luaL_argcheck(L, max > 0, 1, "max_event_bytes must be positive");
  sb_sse *p = lua_newuserdatauv(L, sizeof *p, 0);
  sb_sse_init(p, (size_t)max);
  luaL_setmetatable(L, PARSER_MT);
  return 1;
}

int sb_sse_open(lua_State *L) {
  static const luaL_Reg methods[] = {
      {"feed", l_feed}, {"buffered", l_buffered}, {"count", l_count}, {NULL, NULL}};
  static const luaL_Reg meta[] = {{"__gc", l_gc}, {NULL, NULL}};
  sb_class_register(L, &(sb_class){PARSER_MT, methods, NULL, meta});
  static const luaL_Reg fns[] = {{"parser", l_parser}, {NULL, NULL}};
  sb_module_table(L, "sse", fns);
  return 0;
}
