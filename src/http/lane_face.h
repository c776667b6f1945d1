/* What the HTTP server offers the exec lane (src/lane/exec_lane.c; docs/sandboxd.md "The exec
 * lane"): hooks it calls at a request's head and when the request is complete, and the response
 * object the lane drives as a handler would. The server knows the lane only through the hooks:
 * http does not depend on the lane, the lane depends on http. */
#ifndef SB_HTTP_LANE_FACE_H
#define SB_HTTP_LANE_FACE_H

#include "server_conn.h"

#include <lua.h>
#include <stdbool.h>
#include <stddef.h>

struct sb_http_lane_hooks {
  /* At a request's head: an opaque claim (then the Lua head hook is skipped: the lane checked
   * the bearer and thread key itself) or NULL. */
  void *(*head)(sb_http_conn *c);
  /* The claimed request is complete: true when the lane took it (a response is open). */
  bool (*request)(sb_http_conn *c);
  /* The server closed. */
  void (*release)(sb_http_server *s);
};

/* The server of a core.http.serve object at idx (raises when it is not one, or closed). */
sb_http_server *sb_http_server_check(lua_State *L, int idx);

/* server.c's response object, as the lane drives it. */
typedef struct sb_http_res sb_http_res;
/* A response for c's current request (c->exchange set, HANDLING), the lane's: no Lua object
 * (a userdata, its metatable, two registry refs and its collection per request were ~3.5 % of
 * sandboxd's CPU per walled request) unless handed to Lua with sb_http_res_push. NULL when out
 * of memory. */
sb_http_res *sb_http_res_open(sb_http_conn *c);
/* Hands r to Lua: pushes it as the handler's response object (the one res:write/finish take)
 * and returns it — r itself is gone, the lane keeps no pointer to it past its hand-back. */
sb_http_res *sb_http_res_push(lua_State *L, sb_http_res *r);
/* The lane is done with r (not pushed): freed. One never started leaves its request to be
 * answered otherwise (the Lua path); one started and unfinished ends its connection. */
void sb_http_res_release(sb_http_res *r);
/* The headers table at idx as a head's lines ("name: value\r\n" each, malloc'd, *len bytes),
 * made once for a response that always carries the same headers; raises when one is invalid,
 * or is connection or content-length (the server frames the answer). NULL when out of memory. */
char *sb_http_head_lines(lua_State *L, int idx, size_t *len);
/* res:start(status, headers, {hold = true}) with the headers as sb_http_head_lines made them:
 * no Lua per answer (the table walked twice and the head made a Lua string per answer were ~2 %
 * of sandboxd's CPU per walled request). */
void sb_http_res_start_held_lines(sb_http_res *r, int status, const char *lines, size_t len);
/* res:write(bytes) → false when the peer is gone. */
bool sb_http_res_write(sb_http_res *r, const char *data, size_t n);
/* res:finish(bytes). */
void sb_http_res_finish(sb_http_res *r, const char *data, size_t n);
/* res.closed: the peer went away. */
bool sb_http_res_gone(const sb_http_res *r);

#endif
