/* core.http.serve: the HTTP server's Lua face. Each complete request runs
 * `handler(req, res)` in its own task (created through core.go, the one path for tasks);
 * `res` frames what the handler sends on the connection (server_conn.c).
 *
 * Ownership: the server's C state is malloc'd and anchored (self_ref) while its listener or
 * any connection is open, so a program may drop the object and keep serving. A response
 * object is anchored by its connection while attached; the connection closing or the response
 * finishing detaches it, after which writes are dropped (closed) or refused (finished). */
#include "http.h"
#include "server_conn.h"
#include "server_response.h"
#include "relay.h"
#include "lane_face.h"
#include "../engine/engine.h"
#include "../log/log.h"

#include <signal.h>
#include <stddef.h>
#include <sys/resource.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#define SERVER_MT "switchboard.http.server"
#define RES_MT "switchboard.http.response"

static const sb_http_limits default_limits = {
    .max_header_bytes = 16 * 1024,
    .max_body_bytes = 1024 * 1024,
    .request_timeout_ms = 10000,
    .idle_timeout_ms = 60000,
    .max_connections = 1024,
    .max_write_queue_bytes = 8 * 1024 * 1024,
    .max_bodies_bytes = 64 * 1024 * 1024,
    .max_connections_per_peer = 1024,
};

typedef struct {
  sb_http_server *s; /* NULL after __gc */
} server_ud;

enum { RES_FRESH, RES_STARTED, RES_FINISHED };
enum { MAX_WRITE_BYTES = 1 << 30 }; /* per call; libuv buffers carry an unsigned length */
enum { LOG_PATH_MAX = 48 };         /* a client's path is logged cut to this, control bytes as ? */

typedef struct sb_http_res {
  sb_http_conn *c; /* NULL once detached */
  int ref;         /* registry anchor while attached (a Lua object's only) */
  bool c_owned;    /* the exec lane's, malloc'd: no Lua object unless handed to Lua */
  uint8_t phase;
  bool closed;       /* the connection went away before the response finished */
  bool head_request; /* HEAD: the head is sent, the body never */
  bool http10;
  int status;
  sb_http_frame frame; /* the framing decided when the head was built */
  lua_State *drainer;  /* a task waiting in res:drain(), or NULL */
  char *held;          /* res:start{hold}: the head, sent with the first body bytes or the end */
  size_t held_len;
  double started_ms;
  const char *method;  /* llhttp's static name */
  char path[LOG_PATH_MAX + 4]; /* for log lines: cut, "..." marks the cut */
  char remote[46];
} res_ud;

/* ---- handler tasks ----------------------------------------------------------------------- */

static void res_settle(lua_State *L, res_ud *r, bool failed);

/* Continuation of handler_task once the handler returned or raised (possibly after yields). */
static int handler_done(lua_State *L, int status, lua_KContext ctx) {
  (void)ctx;
  res_ud *r = luaL_checkudata(L, 3, RES_MT);
  bool failed = status != LUA_OK && status != LUA_YIELD;
  if (failed) {
    char where[160];
    snprintf(where, sizeof where, "http handler %s %s", r->method, r->path);
    sb_log_error_text(where, lua_tostring(L, -1));
  }
  res_settle(L, r, failed);
  return 0;
}

/* The task body: handler(req, res) under a traceback handler; then the response is settled
 * (500 if it raised before sending anything, else completed). Stack: handler, req, res. */
static int handler_task(lua_State *L) {
  lua_settop(L, 3);
  lua_pushcfunction(L, sb_traceback); /* 4 */
  lua_pushvalue(L, 1);
  lua_pushvalue(L, 2);
  lua_pushvalue(L, 3);
  int status = lua_pcallk(L, 2, 0, 4, 0, handler_done);
  return handler_done(L, status, 0);
}

/* ---- the request ------------------------------------------------------------------------- */

/* The request as the handler (with_body) or the on_head hook (without: the body is not read
 * yet; content_length is the declared length, chunked says a chunked body follows) sees it. */
static void push_request(lua_State *L, sb_http_conn *c, bool with_body) {
  const sb_http_request *q = &c->req;
  lua_createtable(L, 0, 10);
  lua_pushstring(L, sb_http_request_method(q));
  lua_setfield(L, -2, "method");
  const char *path, *query;
  size_t path_len, query_len;
  sb_http_split_target(q->head, q->target_len, &path, &path_len, &query, &query_len);
  lua_pushlstring(L, path, path_len);
  lua_setfield(L, -2, "path");
  lua_pushlstring(L, query, query_len);
  lua_setfield(L, -2, "query");
  lua_pushstring(L, sb_http_request_version_minor(q) == 0 ? "1.0" : "1.1");
  lua_setfield(L, -2, "version");
  lua_createtable(L, 0, (int)q->n_headers);
  for (size_t i = 0; i < q->n_headers; i++) {
    const sb_http_header *h = &q->headers[i];
    lua_pushlstring(L, sb_http_header_name(q, i), h->name_len);
    lua_pushvalue(L, -1);
    lua_rawget(L, -3);
    if (lua_isnil(L, -1)) { /* first of its name */
      lua_pop(L, 1);
      lua_pushlstring(L, sb_http_header_value(q, i), h->value_len);
    } else { /* repeated: joined with ", " (RFC 9110 5.3) */
      lua_pushliteral(L, ", ");
      lua_pushlstring(L, sb_http_header_value(q, i), h->value_len);
      lua_concat(L, 3);
    }
    lua_rawset(L, -3);
  }
  lua_setfield(L, -2, "headers");
  if (with_body) {
    lua_pushlstring(L, q->body != NULL ? q->body : "", q->body_len);
    lua_setfield(L, -2, "body");
  } else {
    bool chunked = (q->parser.flags & F_CHUNKED) != 0;
    if (!chunked) {
      lua_pushinteger(L, q->has_body ? (lua_Integer)q->parser.content_length : 0);
      lua_setfield(L, -2, "content_length");
    }
    lua_pushboolean(L, chunked);
    lua_setfield(L, -2, "chunked");
  }
  lua_pushstring(L, c->remote_addr);
  lua_setfield(L, -2, "remote_addr");
  lua_pushinteger(L, c->remote_port);
  lua_setfield(L, -2, "remote_port");
}

/* A client's path as a log line may carry it: at most LOG_PATH_MAX bytes, bytes outside
 * printable ASCII as '?', "..." where it was cut; after a log_hide prefix, "<hidden>". */
static void log_path(char out[LOG_PATH_MAX + 4], const sb_http_server *s, const sb_http_request *q) {
  const char *path, *query;
  size_t path_len, query_len;
  sb_http_split_target(q->head, q->target_len, &path, &path_len, &query, &query_len);
  for (size_t i = 0; i < s->n_log_hide; i++) {
    size_t n = strlen(s->log_hide[i]);
    if (path_len > n && memcmp(path, s->log_hide[i], n) == 0) {
      snprintf(out, LOG_PATH_MAX + 4, "%s<hidden>", s->log_hide[i]);
      return;
    }
  }
  size_t n = path_len > LOG_PATH_MAX ? LOG_PATH_MAX : path_len;
  for (size_t i = 0; i < n; i++)
    out[i] = path[i] > ' ' && path[i] < 127 ? path[i] : '?';
  if (n < path_len) {
    memcpy(out + n, "...", 3);
    n += 3;
  }
  out[n] = '\0';
}

static void init_response(res_ud *r, sb_http_conn *c) {
  memset(r, 0, sizeof *r);
  r->ref = LUA_NOREF;
  r->phase = RES_FRESH;
  r->head_request = sb_http_request_is_head(&c->req);
  r->http10 = sb_http_request_version_minor(&c->req) == 0;
  r->started_ms = sb_now_ms();
  r->method = sb_http_request_method(&c->req);
  log_path(r->path, c->server, &c->req);
  size_t n = strnlen(c->remote_addr, sizeof r->remote - 1); /* (an address: it fits) */
  memcpy(r->remote, c->remote_addr, n);
  r->remote[n] = '\0';
}

/* ---- the request, built once ----------------------------------------------------------- */

/* The table the on_head hook let on is the handler's too: a request's table (its headers are
 * most of the cost) is built once, and what the hook established on it holds for the handler
 * (sandboxd/auth.lua's bearer check is made once per request this way). One slot per server:
 * a request's hook and its handler run on the same connection with no other hook of that
 * connection between them, so a slot naming this connection holds this very request's table.
 * Another connection's hook in between (this request's body came in a later read) takes the
 * slot, and this handler gets a table built afresh — the same fields, nothing the hook left. */
static void hold_head_table(lua_State *L, sb_http_conn *c, int idx) {
  sb_http_server *s = c->server;
  lua_pushvalue(L, idx);
  if (s->head_req_ref == LUA_NOREF) {
    s->head_req_ref = luaL_ref(L, LUA_REGISTRYINDEX);
  } else {
    lua_rawseti(L, LUA_REGISTRYINDEX, s->head_req_ref); /* the slot is reused, not re-made */
  }
  s->head_req_conn = c;
}

/* Pushes the table c's hook let on (true), or nothing (false): then the caller builds one. */
static bool take_head_table(lua_State *L, sb_http_conn *c) {
  sb_http_server *s = c->server;
  if (s->head_req_conn != c || s->head_req_ref == LUA_NOREF)
    return false;
  lua_rawgeti(L, LUA_REGISTRYINDEX, s->head_req_ref);
  /* the slot keeps its reference for the next request; the table must not outlive its own */
  lua_pushboolean(L, 0);
  lua_rawseti(L, LUA_REGISTRYINDEX, s->head_req_ref);
  s->head_req_conn = NULL;
  return true;
}

/* The handler's table from the hook's: the body in, the head-only fields out. */
static void push_handler_request(lua_State *L, sb_http_conn *c) {
  if (!take_head_table(L, c)) {
    push_request(L, c, true);
    return;
  }
  const sb_http_request *q = &c->req;
  lua_pushlstring(L, q->body != NULL ? q->body : "", q->body_len);
  lua_setfield(L, -2, "body");
  lua_pushnil(L);
  lua_setfield(L, -2, "content_length");
  lua_pushnil(L);
  lua_setfield(L, -2, "chunked");
}

static bool dispatched;

/* Under sb_pcall: builds req and res and hands them to core.go(handler_task, ...). */
static int dispatch(lua_State *L) {
  sb_http_conn *c = lua_touserdata(L, 1);
  lua_settop(L, 1);
  lua_getfield(L, LUA_REGISTRYINDEX, "switchboard.core");           /* 2 */
  lua_getfield(L, 2, "go");                                          /* 3 */
  lua_pushcfunction(L, handler_task);                                /* 4 */
  lua_rawgeti(L, LUA_REGISTRYINDEX, c->server->handler_ref);         /* 5 */
  push_handler_request(L, c);                                        /* 6 */
  res_ud *r = lua_newuserdatauv(L, sizeof *r, 0);                    /* 7 */
  init_response(r, c);
  luaL_setmetatable(L, RES_MT);
  lua_pushvalue(L, 7);
  lua_insert(L, 3); /* a copy of res below go's frame, anchored once go succeeded */
  lua_call(L, 4, 0);
  r->ref = luaL_ref(L, LUA_REGISTRYINDEX);
  r->c = c;
  c->exchange = r;
  dispatched = true;
  return 0;
}

static bool on_request(sb_http_conn *c) {
  if (c->lane_entry != NULL && c->server->lane_hooks != NULL && c->server->lane_hooks->request(c))
    return true; /* the exec lane serves it (exec_lane.c) */
  lua_State *L = sb_main_state();
  dispatched = false;
  lua_pushcfunction(L, dispatch);
  lua_pushlightuserdata(L, c);
  sb_pcall(L, 1, "http.serve dispatch");
  return dispatched;
}

/* ---- the on_head hook ------------------------------------------------------------------- */

static int check_status(lua_State *L, int idx);
static int opt_headers(lua_State *L, int idx);
static void build_head(lua_State *L, sb_http_frame *fr, int hidx, lua_Integer body_len);

/* Under lua_pcall: on_head(req) → nil (go on) or status [, headers [, body]], which is answered
 * here. Returns a boolean: go on. */
static int head_hook(lua_State *L) {
  sb_http_conn *c = lua_touserdata(L, 1);
  lua_settop(L, 0);
  push_request(L, c, false); /* 1: kept for the handler when the hook lets the request on */
  lua_rawgeti(L, LUA_REGISTRYINDEX, c->server->on_head_ref);
  lua_pushvalue(L, 1);
  lua_call(L, 1, 3); /* 2 status, 3 headers, 4 body */
  if (lua_isnil(L, 2)) {
    hold_head_table(L, c, 1);
    lua_pushboolean(L, 1);
    return 1;
  }
  lua_remove(L, 1); /* refused: the table goes; 1 status, 2 headers, 3 body */
  int status = check_status(L, 1);
  int hidx = opt_headers(L, 2);
  size_t n = 0;
  const char *body = luaL_optlstring(L, 3, "", &n);
  luaL_argcheck(L, n <= MAX_WRITE_BYTES, 3, "body too large");
  /* A body nobody read ends the connection; a bodyless request may keep it. */
  sb_http_frame fr = {.status = status, .head_request = sb_http_request_is_head(&c->req),
                      .http10 = sb_http_request_version_minor(&c->req) == 0,
                      .keep_alive = c->keep_alive && !c->req.has_body};
  build_head(L, &fr, hidx, (lua_Integer)n);
  c->keep_alive = fr.keep_alive;
  size_t hn;
  const char *head = lua_tolstring(L, -1, &hn);
  uv_buf_t bufs[2] = {uv_buf_init((char *)head, (unsigned)hn),
                      uv_buf_init((char *)body, fr.framing == SB_HTTP_FRAME_LENGTH ? (unsigned)n : 0)};
  char status_text[8], path[LOG_PATH_MAX + 4];
  snprintf(status_text, sizeof status_text, "%d", status);
  log_path(path, c->server, &c->req);
  sb_log_field f[] = {{"remote", c->remote_addr, false},
                      {"method", sb_http_request_method(&c->req), false},
                      {"path", path, false}, {"status", status_text, true},
                      {"outcome", "refused at head", false}};
  sb_log_write("debug", "http.request", f, sizeof f / sizeof f[0]);
  sb_http_conn_write(c, bufs, 2);
  lua_pushboolean(L, 0);
  return 1;
}

static bool on_head(sb_http_conn *c) {
  /* an /exec the armed lane may take: its bearer and thread key were checked there; should
   * the body not be the lane's, the handler checks them again (routes.lua), as it always does */
  c->lane_entry = c->server->lane_hooks != NULL ? c->server->lane_hooks->head(c) : NULL;
  if (c->lane_entry != NULL)
    return true;
  if (c->server->on_head_ref == LUA_NOREF)
    return true;
  lua_State *L = sb_main_state();
  int top = lua_gettop(L);
  lua_pushcfunction(L, sb_traceback);
  lua_pushcfunction(L, head_hook);
  lua_pushlightuserdata(L, c);
  bool go = false;
  if (lua_pcall(L, 1, 1, top + 1) == LUA_OK) {
    go = lua_toboolean(L, -1);
  } else {
    sb_log_error_text("http on_head hook", lua_tostring(L, -1));
    sb_http_conn_answer(c, 500, "internal server error");
  }
  lua_settop(L, top);
  return go;
}

/* ---- the response ------------------------------------------------------------------------ */

/* Resumes a task waiting in res:drain() with `ok`. */
static void wake_drainer(res_ud *r, bool ok) {
  lua_State *t = r->drainer;
  if (t == NULL)
    return;
  r->drainer = NULL;
  if (r->c != NULL)
    sb_http_conn_stall_watch(r->c, false);
  lua_pushboolean(t, ok);
  sb_task_complete(t, 1);
}

static void on_drained(sb_http_conn *c) { wake_drainer(c->exchange, true); }

static void log_request(res_ud *r, const char *outcome) {
  if (!sb_log_enabled("debug")) /* a debug line: its two printfs (one a %.3f) were made for every
                                 * request and dropped at info (issue 43, ~1 % of sandboxd's CPU) */
    return;
  char status[8], ms[32];
  snprintf(status, sizeof status, "%d", r->status);
  snprintf(ms, sizeof ms, "%.3f", sb_now_ms() - r->started_ms);
  sb_log_field f[] = {{"remote", r->remote, false}, {"method", r->method, false},
                      {"path", r->path, false},     {"status", status, true},
                      {"ms", ms, true},             {"outcome", outcome, false}};
  sb_log_write("debug", "http.request", f, sizeof f / sizeof f[0]);
}

static void detach(res_ud *r) {
  sb_http_conn *c = r->c;
  if (c == NULL)
    return;
  wake_drainer(r, false);
  free(r->held);
  r->held = NULL;
  r->c = NULL;
  c->exchange = NULL;
  luaL_unref(sb_main_state(), LUA_REGISTRYINDEX, r->ref);
  r->ref = LUA_NOREF;
}

static void on_detach(sb_http_conn *c) {
  res_ud *r = c->exchange;
  if (r->phase != RES_FINISHED) {
    r->closed = true;
    log_request(r, "peer gone");
  }
  detach(r);
}

/* The response's last byte was queued: hand the connection back. */
static void complete(res_ud *r) {
  r->phase = RES_FINISHED;
  sb_http_conn *c = r->c;
  if (c == NULL)
    return;
  log_request(r, "sent");
  detach(r);
  sb_http_conn_response_done(c);
}

enum { MAX_PIECES = 6 };

/* A held head goes out in the same write as the first bytes after it: a short answer is one
 * segment instead of three (head, body, last chunk). */
static bool send_bytes(res_ud *r, const uv_buf_t *bufs, unsigned n) {
  if (r->c == NULL)
    return false;
  if (r->held == NULL)
    return sb_http_conn_write(r->c, bufs, n); /* on false the connection detached r */
  uv_buf_t all[MAX_PIECES + 1];
  char *held = r->held;
  r->held = NULL;
  all[0] = uv_buf_init(held, (unsigned)r->held_len);
  for (unsigned i = 0; i < n && i < MAX_PIECES; i++)
    all[i + 1] = bufs[i];
  bool ok = sb_http_conn_write(r->c, all, (n < MAX_PIECES ? n : MAX_PIECES) + 1); /* copies what waits */
  free(held);
  return ok;
}

static int check_status(lua_State *L, int idx) {
  lua_Integer status = luaL_checkinteger(L, idx);
  luaL_argcheck(L, status >= 200 && status <= 599, idx, "a final HTTP status (200-599) expected");
  return (int)status;
}

/* A head is assembled in two passes over the handler's headers: the first validates (and may
 * raise) and measures, the second copies into a buffer owned by Lua (a userdata), so an error
 * never leaks memory and the Lua stack stays simple. */
typedef struct {
  char *out; /* NULL while measuring */
  size_t len;
} head_out;

static void put(head_out *h, const char *s, size_t n) {
  if (h->out != NULL)
    memcpy(h->out + h->len, s, n);
  h->len += n;
}

static void put_header(lua_State *L, head_out *h, const char *name, size_t name_len, int vidx) {
  int t = lua_type(L, vidx);
  if (t != LUA_TSTRING && t != LUA_TNUMBER)
    luaL_error(L, "response header %s: a string or number expected", name);
  size_t len;
  const char *value = lua_tolstring(L, vidx, &len); /* converts the stack copy only */
  if (!sb_http_value_valid(value, len))
    luaL_error(L, "response header %s: CR, LF and NUL are not allowed in a value", name);
  put(h, name, name_len);
  put(h, ": ", 2);
  put(h, value, len);
  put(h, "\r\n", 2);
}

typedef struct {
  bool close;        /* a `connection: close` from the handler */
  bool has_length;   /* a content-length from the handler */
  uint64_t length;
} head_flags;

static bool parse_length(const char *s, size_t n, uint64_t *out) {
  if (n == 0 || n > 15)
    return false;
  uint64_t v = 0;
  for (size_t i = 0; i < n; i++) {
    if (s[i] < '0' || s[i] > '9')
      return false;
    v = v * 10 + (uint64_t)(s[i] - '0');
  }
  *out = v;
  return true;
}

/* One pass over the headers table at `hidx`: framing headers are taken out (the server
 * writes its own), the rest are copied (measured when h->out is NULL). */
static void header_pass(lua_State *L, int hidx, head_out *h, head_flags *f) {
  lua_pushnil(L);
  while (lua_next(L, hidx) != 0) {
    int v = lua_gettop(L);
    if (lua_type(L, v - 1) != LUA_TSTRING)
      luaL_error(L, "response headers: names must be strings");
    size_t nlen;
    const char *name = lua_tolstring(L, v - 1, &nlen);
    if (!sb_http_name_valid(name, nlen))
      luaL_error(L, "response headers: invalid header name '%s'", name);
    if (sb_http_name_is(name, nlen, "transfer-encoding")) {
      luaL_error(L, "response headers: transfer-encoding is framed by the server");
    } else if (sb_http_name_is(name, nlen, "connection")) {
      const char *value = lua_tostring(L, v);
      if (value == NULL)
        luaL_error(L, "response header connection: a string expected");
      if (strstr(value, "close") != NULL || strstr(value, "Close") != NULL)
        f->close = true;
    } else if (sb_http_name_is(name, nlen, "content-length")) {
      size_t vlen;
      const char *value = lua_type(L, v) == LUA_TNUMBER || lua_type(L, v) == LUA_TSTRING
                              ? lua_tolstring(L, v, &vlen) : NULL;
      if (value == NULL || !parse_length(value, vlen, &f->length))
        luaL_error(L, "response header content-length: a byte count expected");
      f->has_length = true;
    } else if (lua_type(L, v) == LUA_TTABLE) { /* a repeated header, e.g. set-cookie */
      lua_Integer n = luaL_len(L, v);
      for (lua_Integer i = 1; i <= n; i++) {
        lua_rawgeti(L, v, i);
        put_header(L, h, name, nlen, lua_gettop(L));
        lua_pop(L, 1);
      }
    } else {
      put_header(L, h, name, nlen, v);
    }
    lua_settop(L, v - 1);
  }
}

/* Builds the head for `status` and the headers table at `hidx` (0: none) into a Lua string
 * (pushed); the framing decisions are server_response.c's (sb_http_frame_head). `body_len` >= 0
 * is res:send's body, whose content-length the server writes. Raises on invalid headers,
 * before anything is sent. */
static void build_head(lua_State *L, sb_http_frame *fr, int hidx, lua_Integer body_len) {
  head_flags f = {false, false, 0};
  head_out h = {NULL, 0};
  if (hidx != 0)
    header_pass(L, hidx, &h, &f);
  size_t cap = SB_HTTP_STATUS_LINE_MAX + SB_HTTP_DATE_LINE_MAX + h.len + SB_HTTP_FRAME_LINES_MAX;
  char *buf = lua_newuserdatauv(L, cap, 0);
  int buf_idx = lua_gettop(L);
  h = (head_out){buf, 0};
  char line[SB_HTTP_STATUS_LINE_MAX];
  put(&h, line, sb_http_status_line(line, fr->status));
  char date[SB_HTTP_DATE_LINE_MAX];
  put(&h, date, sb_http_date_line(date));
  if (hidx != 0) {
    head_flags again = {false, false, 0};
    header_pass(L, hidx, &h, &again);
  }
  fr->handler_close = f.close;
  fr->has_length = body_len >= 0 || f.has_length;
  fr->length_is_body = body_len >= 0;
  fr->length = body_len >= 0 ? (uint64_t)body_len : f.length;
  char fixed[SB_HTTP_FRAME_LINES_MAX];
  put(&h, fixed, sb_http_frame_head(fr, fixed));
  lua_pushlstring(L, buf, h.len);
  lua_remove(L, buf_idx);
}

static void push_head(lua_State *L, res_ud *r, int status, int hidx, lua_Integer body_len) {
  r->frame = (sb_http_frame){.status = status, .head_request = r->head_request,
                             .http10 = r->http10, .keep_alive = r->c != NULL && r->c->keep_alive};
  build_head(L, &r->frame, hidx, body_len);
  if (r->c != NULL && !r->frame.keep_alive)
    r->c->keep_alive = false;
  r->status = status;
}

/* Frames body bytes into bufs (3 pieces: chunk prefix, bytes, suffix); returns how many
 * pieces to send (0: nothing). */
static unsigned frame_bytes(lua_State *L, res_ud *r, const char *data, size_t n,
                            sb_http_body_piece *piece, uv_buf_t bufs[3]) {
  if (n > MAX_WRITE_BYTES)
    luaL_error(L, "res:write: at most %d bytes per call", MAX_WRITE_BYTES);
  switch (sb_http_frame_body(&r->frame, n, piece)) {
  case SB_HTTP_BODY_OVER:
    return (unsigned)luaL_error(L, "res:write: %I bytes over the declared content-length",
                                (lua_Integer)piece->over);
  case SB_HTTP_BODY_SKIP:
    return 0;
  default:
    bufs[0] = uv_buf_init(piece->prefix, (unsigned)piece->prefix_len);
    bufs[1] = uv_buf_init((char *)data, (unsigned)n);
    bufs[2] = uv_buf_init((char *)piece->suffix, (unsigned)piece->suffix_len);
    return 3;
  }
}

/* Sends body bytes in the response's framing. Returns false when they were dropped because
 * the peer is gone. */
static bool body_bytes(lua_State *L, res_ud *r, const char *data, size_t n) {
  if (r->c == NULL)
    return false;
  sb_http_body_piece piece;
  uv_buf_t bufs[3];
  unsigned k = frame_bytes(L, r, data, n, &piece, bufs);
  return k == 0 || send_bytes(r, bufs, k);
}

/* Ends the body: the last chunk, or a close when fewer bytes than declared were sent. `pre`
 * (npre pieces: the last body bytes) goes out in the same write as the last chunk. */
static void end_body(res_ud *r, const uv_buf_t *pre, unsigned npre) {
  if (r->c == NULL)
    return;
  char end[SB_HTTP_FRAME_END_MAX];
  bool short_body;
  size_t n = sb_http_frame_end(&r->frame, end, &short_body);
  uv_buf_t bufs[4];
  unsigned k = 0;
  for (; k < npre && k < 3; k++)
    bufs[k] = pre[k];
  if (n > 0)
    bufs[k++] = uv_buf_init(end, (unsigned)n);
  if ((k > 0 || r->held != NULL) && !send_bytes(r, bufs, k))
    return;
  if (short_body) {
    sb_log_field f[] = {{"method", r->method, false}, {"path", r->path, false}};
    sb_log_write("warn", "http.short_body", f, 2);
  }
  if (!r->frame.keep_alive)
    r->c->keep_alive = false;
  complete(r);
}

static res_ud *check_res(lua_State *L) { return luaL_checkudata(L, 1, RES_MT); }

static int opt_headers(lua_State *L, int idx) {
  if (lua_isnoneornil(L, idx))
    return 0;
  luaL_checktype(L, idx, LUA_TTABLE);
  return idx;
}

/* res:start(status [, headers [, {hold = true}]]) → true, or false when the peer is gone.
 * hold: the head waits for the first body bytes (or the end) and goes out in their write. */
static int l_res_start(lua_State *L) {
  res_ud *r = check_res(L);
  int status = check_status(L, 2);
  int hidx = opt_headers(L, 3);
  bool hold = false;
  if (!lua_isnoneornil(L, 4)) {
    luaL_checktype(L, 4, LUA_TTABLE);
    hold = lua_getfield(L, 4, "hold") != LUA_TNIL && lua_toboolean(L, -1);
    lua_pop(L, 1);
  }
  if (r->phase != RES_FRESH)
    return luaL_error(L, "res:start: the response was already started");
  push_head(L, r, status, hidx, -1);
  r->phase = RES_STARTED;
  size_t n;
  const char *head = lua_tolstring(L, -1, &n);
  if (hold && r->c != NULL && (r->held = malloc(n)) != NULL) {
    memcpy(r->held, head, n);
    r->held_len = n;
    lua_pushboolean(L, 1);
    return 1;
  }
  uv_buf_t buf = uv_buf_init((char *)head, (unsigned)n);
  lua_pushboolean(L, send_bytes(r, &buf, 1));
  return 1;
}

/* res:write(bytes [, i [, j]]) → true, or false when the peer is gone (the bytes are dropped).
 * i, j: the slice bytes:sub(i, j) would give, sent without making that copy. */
static int l_res_write(lua_State *L) {
  res_ud *r = check_res(L);
  size_t n;
  const char *data = luaL_checklstring(L, 2, &n);
  if (!lua_isnoneornil(L, 3)) {
    lua_Integer i = luaL_checkinteger(L, 3), j = luaL_optinteger(L, 4, (lua_Integer)n);
    luaL_argcheck(L, i >= 1, 3, "must be at least 1");
    if (j > (lua_Integer)n)
      j = (lua_Integer)n;
    data += i - 1;
    n = j >= i ? (size_t)(j - i + 1) : 0;
  }
  if (r->phase == RES_FRESH)
    return luaL_error(L, "res:write: call res:start first");
  if (r->phase == RES_FINISHED)
    return luaL_error(L, "res:write: the response is finished");
  lua_pushboolean(L, body_bytes(L, r, data, n));
  return 1;
}

/* res:drain() → true once the bytes queued for the peer fell under SB_HTTP_DRAIN_MARK (at
 * once when they are), false when the peer is gone — or took nothing for the request timeout,
 * which closes the connection. A handler streaming a large answer writes a slice, drains,
 * writes the next, so the answer never piles up in memory however slowly the peer reads. */
static int l_res_drain(lua_State *L) {
  res_ud *r = check_res(L);
  if (r->c == NULL) {
    lua_pushboolean(L, 0);
    return 1;
  }
  if (sb_http_conn_queued(r->c) <= SB_HTTP_DRAIN_MARK) {
    lua_pushboolean(L, 1);
    return 1;
  }
  if (r->drainer != NULL)
    return luaL_error(L, "res:drain: another task is draining this response");
  sb_task_check(L, "res:drain");
  r->drainer = L;
  sb_http_conn_stall_watch(r->c, true);
  return sb_task_yield(L);
}

/* res:finish([bytes]) → true, or false when the peer is gone. */
static int l_res_finish(lua_State *L) {
  res_ud *r = check_res(L);
  size_t n = 0;
  const char *data = luaL_optlstring(L, 2, NULL, &n);
  if (r->phase == RES_FRESH)
    return luaL_error(L, "res:finish: call res:start first (or res:send)");
  if (r->phase == RES_FINISHED)
    return luaL_error(L, "res:finish: the response is already finished");
  sb_http_body_piece piece;
  uv_buf_t bufs[3];
  unsigned k = data != NULL && n > 0 && r->c != NULL ? frame_bytes(L, r, data, n, &piece, bufs) : 0;
  end_body(r, bufs, k); /* the last bytes and the last chunk in one write */
  r->phase = RES_FINISHED;
  lua_pushboolean(L, !r->closed);
  return 1;
}

/* Head and body in one write, then complete. */
static bool send_whole(lua_State *L, res_ud *r, int status, int hidx, const char *body,
                       size_t n) {
  push_head(L, r, status, hidx, (lua_Integer)n);
  r->phase = RES_STARTED;
  size_t hn;
  const char *head = lua_tolstring(L, -1, &hn);
  uv_buf_t bufs[2] = {uv_buf_init((char *)head, (unsigned)hn), uv_buf_init((char *)body, 0)};
  if (r->frame.framing == SB_HTTP_FRAME_LENGTH)
    bufs[1].len = n;
  bool sent = send_bytes(r, bufs, 2);
  lua_pop(L, 1);
  r->frame.remaining = 0;
  complete(r);
  r->phase = RES_FINISHED;
  return sent;
}

/* res:send(status [, headers [, body]]) → true, or false when the peer is gone. */
static int l_res_send(lua_State *L) {
  res_ud *r = check_res(L);
  int status = check_status(L, 2);
  int hidx = opt_headers(L, 3);
  size_t n = 0;
  const char *body = luaL_optlstring(L, 4, "", &n);
  luaL_argcheck(L, n <= MAX_WRITE_BYTES, 4, "body too large for one call");
  if (r->phase != RES_FRESH)
    return luaL_error(L, "res:send: the response was already started");
  lua_pushboolean(L, send_whole(L, r, status, hidx, body, n));
  return 1;
}

/* res:relay(upstream, status, head) → true once the relay ended (relay.c): `head` goes to the
 * peer as it is, then bytes are relayed both ways between the peer and the upstream
 * (core.http.connect) until either ends; the connection is not kept alive after it. For
 * sandboxd's port proxy: a WebSocket after its 101, an answer whose end only its upstream
 * knows. false when the peer is gone already. */
static int l_res_relay(lua_State *L) {
  res_ud *r = check_res(L);
  sb_upstream_check(L, 2);
  lua_Integer status = luaL_checkinteger(L, 3); /* (for the log: 101 is the usual one) */
  luaL_argcheck(L, status >= 100 && status <= 599, 3, "an HTTP status expected");
  size_t n;
  const char *head = luaL_checklstring(L, 4, &n);
  luaL_argcheck(L, n <= MAX_WRITE_BYTES, 4, "head too large for one call");
  if (r->phase != RES_FRESH)
    return luaL_error(L, "res:relay: the response was already started");
  sb_task_check(L, "res:relay");
  r->phase = RES_FINISHED;
  r->status = (int)status;
  sb_http_conn *c = r->c;
  if (c == NULL) {
    lua_pushboolean(L, 0);
    return 1;
  }
  log_request(r, "relayed");
  detach(r);
  c->keep_alive = false;
  return sb_relay_start(L, c, 2, head, n);
}

/* The handler raised before any byte went out: a whole 500 answers for it. */
static void answer_raised(res_ud *r) {
  sb_http_conn *c = r->c;
  r->status = 500;
  r->phase = RES_FINISHED;
  log_request(r, "handler raised");
  detach(r);
  sb_http_conn_answer(c, 500, "internal server error");
}

/* After the handler returned (or raised): a response it did not finish is finished for it. */
static void res_settle(lua_State *L, res_ud *r, bool failed) {
  if (r->c == NULL) {
    r->phase = RES_FINISHED;
    return;
  }
  if (r->phase == RES_FRESH) {
    if (failed)
      answer_raised(r);
    else /* returned without answering: an explicit "nothing to say" */
      send_whole(L, r, 204, 0, "", 0);
  } else if (r->phase == RES_STARTED) {
    if (failed && r->held != NULL) { /* nothing was sent yet: a whole 500 can still go */
      answer_raised(r);
    } else if (failed) { /* mid-body: a close tells the peer the body is incomplete */
      sb_http_conn *c = r->c;
      log_request(r, "handler raised mid-response");
      detach(r);
      sb_http_conn_close(c);
    } else {
      end_body(r, NULL, 0);
    }
    r->phase = RES_FINISHED;
  }
}

static int l_res_closed(lua_State *L) {
  lua_pushboolean(L, check_res(L)->closed);
  return 1;
}

static int l_res_finished(lua_State *L) {
  lua_pushboolean(L, check_res(L)->phase == RES_FINISHED);
  return 1;
}

static int l_res_started(lua_State *L) {
  lua_pushboolean(L, check_res(L)->phase != RES_FRESH);
  return 1;
}

/* For a request log; 0 until a head was sent. */
static int l_res_status(lua_State *L) {
  lua_pushinteger(L, check_res(L)->status);
  return 1;
}

static int l_res_tostring(lua_State *L) {
  res_ud *r = check_res(L);
  lua_pushfstring(L, "http.response(%s %s)", r->method, r->path);
  return 1;
}

/* ---- the exec lane's face (lane_face.h) -------------------------------------------------- */

sb_http_res *sb_http_res_open(sb_http_conn *c) {
  res_ud *r = malloc(sizeof *r);
  if (r == NULL)
    return NULL;
  init_response(r, c);
  r->c_owned = true;
  r->c = c;
  c->exchange = r;
  return r;
}

sb_http_res *sb_http_res_push(lua_State *L, sb_http_res *r) {
  res_ud *u = lua_newuserdatauv(L, sizeof *u, 0);
  *u = *r; /* the held head and the framing move with it */
  free(r);
  u->c_owned = false;
  luaL_setmetatable(L, RES_MT);
  if (u->c != NULL) { /* anchored while attached, as a handler's response is */
    lua_pushvalue(L, -1);
    u->ref = luaL_ref(L, LUA_REGISTRYINDEX);
    u->c->exchange = u;
  }
  return u;
}

void sb_http_res_release(sb_http_res *r) {
  if (r == NULL || !r->c_owned)
    return;
  if (r->c != NULL && r->phase == RES_FRESH) { /* never started: another may answer */
    r->c->exchange = NULL;
    r->c = NULL;
  } else if (r->c != NULL) { /* dropped unfinished: only a close tells the peer (it detaches r) */
    sb_http_conn_close(r->c);
  }
  free(r->held);
  free(r);
}

char *sb_http_head_lines(lua_State *L, int idx, size_t *len) {
  idx = lua_absindex(L, idx);
  head_flags f = {false, false, 0};
  head_out h = {NULL, 0};
  header_pass(L, idx, &h, &f); /* raises on an invalid header, before anything is kept */
  if (f.close || f.has_length)
    luaL_error(L, "response headers: connection and content-length are the server's here");
  char *lines = malloc(h.len > 0 ? h.len : 1);
  if (lines == NULL)
    return NULL;
  h = (head_out){lines, 0};
  header_pass(L, idx, &h, &f);
  *len = h.len;
  return lines;
}

void sb_http_res_start_held_lines(sb_http_res *r, int status, const char *lines, size_t len) {
  r->frame = (sb_http_frame){.status = status, .head_request = r->head_request,
                             .http10 = r->http10, .keep_alive = r->c != NULL && r->c->keep_alive};
  char line[SB_HTTP_STATUS_LINE_MAX], date[SB_HTTP_DATE_LINE_MAX], fixed[SB_HTTP_FRAME_LINES_MAX];
  uv_buf_t parts[4] = {uv_buf_init(line, (unsigned)sb_http_status_line(line, status)),
                       uv_buf_init(date, (unsigned)sb_http_date_line(date)),
                       uv_buf_init((char *)lines, (unsigned)len),
                       uv_buf_init(fixed, (unsigned)sb_http_frame_head(&r->frame, fixed))};
  if (r->c != NULL && !r->frame.keep_alive)
    r->c->keep_alive = false;
  r->status = status;
  r->phase = RES_STARTED;
  size_t n = parts[0].len + parts[1].len + parts[2].len + parts[3].len;
  if (r->c != NULL && (r->held = malloc(n)) != NULL) {
    for (size_t i = 0, at = 0; i < 4; at += parts[i].len, i++)
      memcpy(r->held + at, parts[i].base, parts[i].len);
    r->held_len = n;
  } else {
    send_bytes(r, parts, 4); /* out of memory: the head goes now, on its own */
  }
}

bool sb_http_res_write(sb_http_res *r, const char *data, size_t n) {
  if (r->phase != RES_STARTED)
    return false;
  return body_bytes(sb_main_state(), r, data, n); /* chunked: never over a length */
}

void sb_http_res_finish(sb_http_res *r, const char *data, size_t n) {
  if (r->phase != RES_STARTED)
    return;
  sb_http_body_piece piece;
  uv_buf_t bufs[3];
  unsigned k = data != NULL && n > 0 && r->c != NULL
                   ? frame_bytes(sb_main_state(), r, data, n, &piece, bufs)
                   : 0;
  end_body(r, bufs, k);
  r->phase = RES_FINISHED;
}

bool sb_http_res_gone(const sb_http_res *r) { return r->closed; }

/* ---- the server -------------------------------------------------------------------------- */

/* Engine shutdown: close the listener and every connection now, while the loop is open. */
static void server_shutdown(void *ud) { sb_http_server_stop(ud, true); }

static void on_server_closed(sb_http_server *s) {
  lua_State *L = sb_main_state();
  if (s->lane_hooks != NULL)
    s->lane_hooks->release(s);
  sb_shutdown_unregister(server_shutdown, s);
  if (s->orphaned) { /* the Lua object is gone (or never existed): nothing references s */
    free(s);
    return;
  }
  luaL_unref(L, LUA_REGISTRYINDEX, s->self_ref);
  luaL_unref(L, LUA_REGISTRYINDEX, s->handler_ref);
  luaL_unref(L, LUA_REGISTRYINDEX, s->on_head_ref);
  luaL_unref(L, LUA_REGISTRYINDEX, s->head_req_ref);
  s->head_req_conn = NULL;
  s->self_ref = s->handler_ref = s->on_head_ref = s->head_req_ref = LUA_NOREF;
}

/* What the transport calls (server_conn.h): this face is the layer above it. */
static const sb_http_callbacks lua_face = {.on_head = on_head, .on_drained = on_drained,
                                           .on_request = on_request, .on_detach = on_detach,
                                           .on_server_closed = on_server_closed};

static sb_http_server *check_server(lua_State *L) {
  server_ud *ud = luaL_checkudata(L, 1, SERVER_MT);
  if (ud->s == NULL)
    luaL_error(L, "the server is gone");
  return ud->s;
}

sb_http_server *sb_http_server_check(lua_State *L, int idx) {
  server_ud *ud = luaL_checkudata(L, idx, SERVER_MT);
  if (ud->s == NULL)
    luaL_error(L, "the server is gone");
  return ud->s;
}

static int l_server_close(lua_State *L) {
  sb_http_server *s = check_server(L);
  if (!s->closing)
    sb_http_server_stop(s, false);
  return 0;
}

static int l_server_port(lua_State *L) {
  lua_pushinteger(L, check_server(L)->port);
  return 1;
}

static int l_server_connections(lua_State *L) {
  lua_pushinteger(L, (lua_Integer)check_server(L)->n_conns);
  return 1;
}

static int l_server_closed(lua_State *L) {
  lua_pushboolean(L, check_server(L)->closing);
  return 1;
}

static int l_server_gc(lua_State *L) {
  server_ud *ud = luaL_checkudata(L, 1, SERVER_MT);
  sb_http_server *s = ud->s;
  ud->s = NULL;
  if (s == NULL)
    return 0;
  if (s->listener_closed && s->conns == NULL) { /* fully closed already */
    free(s);
    return 0;
  }
  /* Reaped while open (the state is closing; the engine's shutdown, which closes every server
   * first, has not run yet): close all; the last close callback frees. */
  s->orphaned = true;
  sb_http_server_stop(s, true);
  return 0;
}

static int l_server_tostring(lua_State *L) {
  server_ud *ud = luaL_checkudata(L, 1, SERVER_MT);
  if (ud->s == NULL)
    lua_pushliteral(L, "http.server(gone)");
  else
    lua_pushfstring(L, "http.server(port %d%s)", ud->s->port, ud->s->closing ? ", closed" : "");
  return 1;
}

/* Reads limits.<key> into *out when present: an integer in [min, max]. */
static void limit_field(lua_State *L, int t, const char *key, uint64_t min, uint64_t max,
                        uint64_t *out) {
  lua_getfield(L, t, key);
  if (!lua_isnil(L, -1)) {
    int isnum;
    lua_Integer v = lua_tointegerx(L, -1, &isnum);
    if (!isnum || v < (lua_Integer)min || (uint64_t)v > max)
      luaL_error(L, "core.http.serve: limits.%s must be an integer in [%d, %d]", key, (int)min,
                 (int)(max > 2000000000 ? 2000000000 : max));
    *out = (uint64_t)v;
  }
  lua_pop(L, 1);
}

#define LIMIT(name, min, max) {#name, min, max, offsetof(sb_http_limits, name), \
                              sizeof(((sb_http_limits *)0)->name) == sizeof(size_t)}
/* Every limit core.http.serve takes: its name, its range, and the field it sets. */
static const struct {
  const char *name;
  uint64_t min, max;
  size_t offset;
  bool is_size; /* a size_t field, else a uint64_t */
} limit_fields[] = {
    LIMIT(max_header_bytes, 256, 16u << 20),    LIMIT(max_body_bytes, 0, 1u << 30),
    LIMIT(request_timeout_ms, 1, 86400000),     LIMIT(idle_timeout_ms, 1, 86400000),
    LIMIT(max_connections, 1, 1000000),         LIMIT(max_write_queue_bytes, 1, 1u << 30),
    LIMIT(max_bodies_bytes, 0, 1u << 30),       LIMIT(max_connections_per_peer, 1, 1000000),
};
#undef LIMIT
enum { N_LIMITS = sizeof limit_fields / sizeof limit_fields[0] };

static void read_limits(lua_State *L, int t, sb_http_limits *lim) {
  lua_pushnil(L);
  while (lua_next(L, t) != 0) { /* a misspelt limit must not silently become the default */
    bool ok = false;
    if (lua_type(L, -2) == LUA_TSTRING)
      for (int i = 0; i < N_LIMITS; i++)
        ok = ok || strcmp(lua_tostring(L, -2), limit_fields[i].name) == 0;
    if (!ok)
      luaL_error(L, "core.http.serve: unknown limit '%s'", luaL_tolstring(L, -2, NULL));
    lua_pop(L, 1);
  }
  for (int i = 0; i < N_LIMITS; i++) {
    char *field = (char *)lim + limit_fields[i].offset;
    uint64_t v;
    if (limit_fields[i].is_size) {
      v = *(size_t *)field;
      limit_field(L, t, limit_fields[i].name, limit_fields[i].min, limit_fields[i].max, &v);
      *(size_t *)field = (size_t)v;
    } else {
      limit_field(L, t, limit_fields[i].name, limit_fields[i].min, limit_fields[i].max,
                  (uint64_t *)field);
    }
  }
}

/* Each connection holds a descriptor; past RLIMIT_NOFILE accept(2) fails and every peer, the
 * well-behaved ones first, sees refusals. So max_connections is clamped to the limit less a
 * reserve for everything else the process opens (files, child pipes, the loop's own), and the
 * clamp is logged. */
static void clamp_connections(sb_http_limits *lim) {
  struct rlimit rl;
  if (getrlimit(RLIMIT_NOFILE, &rl) != 0 || rl.rlim_cur == RLIM_INFINITY)
    return;
  uint64_t nofile = (uint64_t)rl.rlim_cur;
  uint64_t reserve = 64 + nofile / 8;
  uint64_t allowed = nofile > reserve + 16 ? nofile - reserve : 16;
  if (lim->max_connections <= allowed)
    return;
  char want[24], got[24], limit[24];
  snprintf(want, sizeof want, "%zu", lim->max_connections);
  snprintf(got, sizeof got, "%llu", (unsigned long long)allowed);
  snprintf(limit, sizeof limit, "%llu", (unsigned long long)nofile);
  sb_log_field f[] = {{"max_connections", want, true}, {"clamped_to", got, true},
                      {"nofile", limit, true},
                      {"fix", "raise the open-files limit (ulimit -n, LimitNOFILE=)", false}};
  sb_log_write("warn", "http.max_connections_clamped", f, 4);
  lim->max_connections = (size_t)allowed;
}

/* log_hide = {prefix, …}: at most 4 path prefixes of 1–32 printable bytes starting with '/'
 * (the program names its secret-bearing routes; the engine only keeps their rest out of logs). */
static size_t read_log_hide(lua_State *L, char hide[4][33]) {
  memset(hide, 0, 4 * 33);
  lua_getfield(L, 1, "log_hide");
  if (lua_isnil(L, -1)) {
    lua_pop(L, 1);
    return 0;
  }
  luaL_checktype(L, -1, LUA_TTABLE);
  size_t n = (size_t)lua_rawlen(L, -1);
  if (n > 4)
    luaL_error(L, "core.http.serve: log_hide takes at most 4 prefixes");
  for (size_t i = 0; i < n; i++) {
    lua_rawgeti(L, -1, (lua_Integer)i + 1);
    size_t len = 0;
    const char *p = lua_type(L, -1) == LUA_TSTRING ? lua_tolstring(L, -1, &len) : NULL;
    bool ok = p != NULL && len >= 1 && len <= 32 && p[0] == '/';
    for (size_t j = 0; ok && j < len; j++)
      ok = p[j] > ' ' && p[j] < 127;
    if (!ok)
      luaL_error(L, "core.http.serve: log_hide[%d] must be a path prefix of 1 to 32 printable "
                    "bytes starting with '/'", (int)i + 1);
    memcpy(hide[i], p, len);
    lua_pop(L, 1);
  }
  lua_pop(L, 1);
  return n;
}

/* core.http.serve{host, port, handler, limits, on_head, log_hide} → server, or nil,
 * {kind="listen", message}. */
static int l_serve(lua_State *L) {
  luaL_checktype(L, 1, LUA_TTABLE);
  lua_getfield(L, 1, "host");
  const char *host = luaL_optstring(L, -1, "127.0.0.1");
  lua_getfield(L, 1, "port");
  int isnum;
  lua_Integer port = lua_tointegerx(L, -1, &isnum);
  if (!isnum || port < 0 || port > 65535)
    return luaL_error(L, "core.http.serve: port must be an integer in [0, 65535]");
  lua_getfield(L, 1, "handler");
  if (lua_type(L, -1) != LUA_TFUNCTION)
    return luaL_error(L, "core.http.serve: handler must be a function");
  int handler_idx = lua_gettop(L);
  sb_http_limits lim = default_limits;
  lua_getfield(L, 1, "limits");
  if (!lua_isnil(L, -1)) {
    luaL_checktype(L, -1, LUA_TTABLE);
    read_limits(L, lua_gettop(L), &lim);
  }
  lua_pop(L, 1);
  clamp_connections(&lim);
  char hide[4][33];
  size_t n_hide = read_log_hide(L, hide);
  lua_getfield(L, 1, "on_head");
  if (!lua_isnil(L, -1) && lua_type(L, -1) != LUA_TFUNCTION)
    return luaL_error(L, "core.http.serve: on_head must be a function");
  int on_head_idx = lua_gettop(L);
  /* A closed socket must be an error value, never a process death; the binary does this in
   * main, and a plain `lua` loading core.so would otherwise die on the first reset peer. */
  struct sigaction old;
  if (sigaction(SIGPIPE, NULL, &old) == 0 && old.sa_handler == SIG_DFL)
    signal(SIGPIPE, SIG_IGN);

  server_ud *ud = lua_newuserdatauv(L, sizeof *ud, 0);
  ud->s = NULL;
  luaL_setmetatable(L, SERVER_MT);
  sb_http_server *s = sb_calloc(L, 1, sizeof *s);
  s->limits = lim;
  memcpy(s->log_hide, hide, sizeof hide);
  s->n_log_hide = n_hide;
  s->up = &lua_face;
  s->self_ref = s->handler_ref = s->on_head_ref = s->head_req_ref = LUA_NOREF;
  int err = sb_http_server_listen(s, host, (int)port);
  if (err != 0) { /* s is freed by its listener's close callback */
    char msg[256];
    snprintf(msg, sizeof msg, "cannot listen on %s:%d: %s", host, (int)port, uv_strerror(err));
    return sb_push_fail(L, "listen", msg);
  }
  ud->s = s;
  sb_shutdown_register(server_shutdown, s);
  lua_pushvalue(L, handler_idx);
  s->handler_ref = luaL_ref(L, LUA_REGISTRYINDEX);
  if (!lua_isnil(L, on_head_idx)) {
    lua_pushvalue(L, on_head_idx);
    s->on_head_ref = luaL_ref(L, LUA_REGISTRYINDEX);
  }
  lua_pushvalue(L, -1);
  s->self_ref = luaL_ref(L, LUA_REGISTRYINDEX);
  char port_text[8];
  snprintf(port_text, sizeof port_text, "%d", s->port);
  sb_log_field f[] = {{"host", host, false}, {"port", port_text, true}};
  sb_log_write("debug", "http.listen", f, 2);
  return 1;
}

int sb_http_server_open(lua_State *L) {
  static const luaL_Reg server_methods[] = {{"close", l_server_close},
                                            {NULL, NULL}};
  static const luaL_Reg server_fields[] = {{"port", l_server_port},
                                           {"connections", l_server_connections},
                                           {"closed", l_server_closed},
                                           {NULL, NULL}};
  static const luaL_Reg server_meta[] = {
      {"__gc", l_server_gc}, {"__tostring", l_server_tostring}, {NULL, NULL}};
  sb_class_register(L, &(sb_class){SERVER_MT, server_methods, server_fields, server_meta});
  static const luaL_Reg res_methods[] = {{"start", l_res_start},   {"write", l_res_write},
                                         {"finish", l_res_finish}, {"send", l_res_send},
                                         {"drain", l_res_drain},   {"relay", l_res_relay},
                                         {NULL, NULL}};
  static const luaL_Reg res_fields[] = {{"closed", l_res_closed},   {"finished", l_res_finished},
                                        {"started", l_res_started}, {"status", l_res_status},
                                        {NULL, NULL}};
  static const luaL_Reg res_meta[] = {{"__tostring", l_res_tostring}, {NULL, NULL}};
  sb_class_register(L, &(sb_class){RES_MT, res_methods, res_fields, res_meta});
  static const luaL_Reg fns[] = {{"serve", l_serve}, {NULL, NULL}};
  sb_module_table(L, "http", fns);
  sb_http_relay_open(L);
  return 0;
}
