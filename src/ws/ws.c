/* core.ws: a WebSocket client on libwebsockets, run on the engine's own libuv loop (lws's
 * libuv event library, loaded by lws as its evlib plugin, with the engine's loop given as a
 * foreign loop). Framing, masking, fragmentation, control frames and the opening handshake are
 * lws's own parser; this file only joins a message's fragments (up to max_message bytes) and
 * hands whole messages to Lua, so it parses no network bytes itself.
 *
 *   local conn, err = core.ws.connect{url = "wss://…", deadline_ms = 10000, signal = sig,
 *                                     max_message = 4 << 20}
 *   conn:send(text)          → true | nil, err       queued; never waits
 *   conn:ping()              → true | nil, err       a ping frame; conn:last_pong_ms() tells
 *   conn:recv{deadline_ms, signal} → message | nil, err   waits for the next whole message
 *   conn:close([code])       → true                  sends a close frame after what is queued
 *   conn:state()             → "connecting" | "open" | "closing" | "closed"
 *
 * Errors are values: {kind = "timeout" | "aborted" | "transport" | "closed", message, code?}.
 * Messages never carry the URL (a Socket Mode URL holds a ticket).
 *
 * Lifetime: a connection (struct conn, malloc'd) is shared by its Lua userdata and its lws
 * wsi; it is freed when both have let go (the userdata collected, the wsi destroyed). */
#include "ws.h"
#include "../engine/engine.h"
#include "../engine/list.h"

#include <libwebsockets.h>
#include <stddef.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#define CONN_MT "switchboard.ws.conn"
#define SB_LWS_WRITE_CLOSE 4 /* lws 4.1 lib/roles/ws/private-lib-roles-ws.h: LWS_WRITE_CLOSE */

enum { DEFAULT_MAX_MESSAGE = 4 << 20,  /* bytes of one inbound message */
       MAX_QUEUED_IN = 64 << 20,       /* bytes received and not yet read by Lua */
       MAX_QUEUED_OUT = 16 << 20 };    /* bytes queued to send */

typedef enum { ST_CONNECTING, ST_OPEN, ST_CLOSING, ST_CLOSED } conn_state;
typedef enum { WAIT_CONNECT, WAIT_RECV } wait_kind;

/* One queued message. Outbound ones keep LWS_PRE bytes of headroom before the payload, as
 * lws_write() needs. */
typedef struct frame {
  struct frame *next;
  size_t len;                     /* payload bytes */
  enum lws_write_protocol type;   /* outbound: LWS_WRITE_TEXT or LWS_WRITE_PING */
  unsigned char data[];
} frame;

/* Frames oldest first, and the payload bytes they hold. */
typedef struct frame_queue {
  frame *head, *tail;
  size_t bytes;
} frame_queue;

typedef struct conn conn;

/* A task waiting on a connection, with its deadline timer (closed asynchronously, so it lives
 * in its own allocation freed by the close callback). */
typedef struct waiter {
  uv_timer_t timer;
  conn *c;                        /* NULL once the wait ended */
  lua_State *task;
  wait_kind kind;
  sb_abort_listener on_abort;
  int signal_ref;                 /* keeps the signal alive while we listen */
} waiter;

struct conn {
  struct lws *wsi;                /* NULL once lws let go of it */
  conn_state state;
  bool lua_alive;                 /* the userdata has not been collected */
  int ud_ref;                     /* anchors the userdata while a connect waits */
  waiter *w;                      /* the waiting task, or NULL */
  frame_queue in;                 /* whole messages Lua has not read yet */
  unsigned char *partial;         /* the message being assembled from fragments (owned) */
  size_t partial_len, partial_cap;
  size_t max_message;             /* bytes */
  frame_queue out;                /* frames to send, in order */
  bool close_wanted;
  bool close_sent;                /* our close frame went out */
  bool failed;                    /* it ended in an error, not a close handshake */
  bool discarding;                /* an inbound message was refused: drop what comes */
  int close_code;
  int peer_code;                  /* the close code the peer sent, 0 when none */
  char why[160];                  /* why it closed (no URL, no payload) */
  double last_pong_ms;            /* monotonic ms of the last pong, 0 before any */
  conn *prev, *next;              /* every live connection, for shutdown */
};

static struct {
  struct lws_context *ctx;
  conn *live;
  uv_check_t flusher; /* writes queued frames right after the poll phase (see flush_queued) */
  bool flusher_ready;
  bool shutting_down; /* no task is resumed any more */
} S;

/* ---- connection bookkeeping ------------------------------------------------------------- */

static void frames_free(frame *f) {
  while (f != NULL) {
    frame *next = f->next;
    free(f);
    f = next;
  }
}

static void queue_push(frame_queue *q, frame *f) {
  SB_QUEUE_APPEND(q->head, q->tail, f);
  q->bytes += f->len;
}

/* Takes the oldest frame off, or returns NULL when there is none. */
static frame *queue_shift(frame_queue *q) {
  frame *f = q->head;
  if (f != NULL) {
    q->head = f->next;
    if (q->head == NULL)
      q->tail = NULL;
    q->bytes -= f->len;
  }
  return f;
}

static void conn_free_if_unused(conn *c) {
  if (c->lua_alive || c->wsi != NULL || c->w != NULL)
    return;
  SB_LIST_REMOVE(S.live, c);
  frames_free(c->in.head);
  frames_free(c->out.head);
  free(c->partial);
  free(c);
}

static void waiter_closed(uv_handle_t *h) { free(h->data); }

/* Ends the wait: detaches it from the connection and the signal, closes its timer. Returns
 * the task to complete (its values pushed by the caller). */
static lua_State *wait_end(conn *c) {
  waiter *w = c->w;
  c->w = NULL;
  w->c = NULL;
  sb_abort_unlisten(&w->on_abort);
  luaL_unref(sb_main_state(), LUA_REGISTRYINDEX, w->signal_ref);
  uv_timer_stop(&w->timer);
  uv_close((uv_handle_t *)&w->timer, waiter_closed);
  return w->task;
}

static int push_closed(lua_State *L, conn *c) {
  lua_pushnil(L);
  sb_error_push(L, c->failed ? "transport" : "closed", c->why[0] ? c->why : "the connection is closed");
  if (c->peer_code != 0) {
    lua_pushinteger(L, c->peer_code);
    lua_setfield(L, -2, "code");
  }
  return 2;
}

/* The connection is gone (closed, failed, destroyed): wake whoever waits. */
static void conn_gone(conn *c, const char *why) {
  if (c->state != ST_CLOSED) {
    c->state = ST_CLOSED;
    if (c->why[0] == '\0' && why != NULL)
      snprintf(c->why, sizeof c->why, "%s", why);
  }
  if (c->w == NULL)
    return;
  wait_kind kind = c->w->kind;
  lua_State *task = wait_end(c);
  if (kind == WAIT_CONNECT) {
    luaL_unref(sb_main_state(), LUA_REGISTRYINDEX, c->ud_ref);
    c->ud_ref = LUA_NOREF;
    char msg[200];
    snprintf(msg, sizeof msg, "websocket connect failed: %s", c->why[0] ? c->why : "closed");
    sb_task_complete(task, sb_push_fail(task, "transport", msg));
  } else if (c->in.head != NULL) {
    /* cannot happen: a waiting recv means the queue was empty */
    sb_task_complete(task, push_closed(task, c));
  } else {
    sb_task_complete(task, push_closed(task, c));
  }
}

static void deliver(conn *c, frame *f) {
  if (c->w != NULL && c->w->kind == WAIT_RECV) {
    lua_State *task = wait_end(c);
    lua_pushlstring(task, (const char *)f->data, f->len);
    free(f);
    sb_task_complete(task, 1);
    return;
  }
  queue_push(&c->in, f);
}

static void detach(struct lws *wsi, conn *c, const char *why) {
  lws_set_opaque_user_data(wsi, NULL);
  c->wsi = NULL;
  conn_gone(c, why);
  conn_free_if_unused(c);
}

/* ---- lws callback ------------------------------------------------------------------------ */

static void request_close(conn *c, int code);

/* A message we will not take (too large, no memory): the rest of it is dropped, the waiting
 * task learns why at once, and the connection closes politely with `code`. (Returning -1
 * from the receive callback instead makes lws 4.1's libuv event library free a buffer twice.) */
static int refuse_message(conn *c, int code) {
  c->discarding = true;
  c->failed = true;
  free(c->partial);
  c->partial = NULL;
  c->partial_len = c->partial_cap = 0;
  request_close(c, code);
  if (c->w != NULL && c->w->kind == WAIT_RECV) {
    lua_State *task = wait_end(c);
    sb_task_complete(task, push_closed(task, c));
  }
  return 0;
}

static int on_receive(struct lws *wsi, conn *c, const void *in, size_t len) {
  if (c->discarding)
    return 0;
  size_t need = c->partial_len + len;
  if (need > c->max_message || c->in.bytes + need > MAX_QUEUED_IN) {
    snprintf(c->why, sizeof c->why, "a message exceeded %zu bytes", c->max_message);
    return refuse_message(c, LWS_CLOSE_STATUS_MESSAGE_TOO_LARGE);
  }
  if (need > c->partial_cap) {
    size_t cap = c->partial_cap ? c->partial_cap : 4096;
    while (cap < need)
      cap *= 2;
    unsigned char *p = realloc(c->partial, cap);
    if (p == NULL) {
      snprintf(c->why, sizeof c->why, "out of memory receiving a message");
      return refuse_message(c, LWS_CLOSE_STATUS_UNEXPECTED_CONDITION);
    }
    c->partial = p;
    c->partial_cap = cap;
  }
  if (len > 0)
    memcpy(c->partial + c->partial_len, in, len);
  c->partial_len = need;
  if (!lws_is_final_fragment(wsi))
    return 0;
  frame *f = malloc(sizeof *f + c->partial_len + 1);
  if (f == NULL) {
    snprintf(c->why, sizeof c->why, "out of memory receiving a message");
    return refuse_message(c, LWS_CLOSE_STATUS_UNEXPECTED_CONDITION);
  }
  f->len = c->partial_len;
  f->type = LWS_WRITE_TEXT;
  memcpy(f->data, c->partial, c->partial_len);
  c->partial_len = 0;
  deliver(c, f);
  return 0;
}

/* Writes the oldest outbound frame. False when the socket took less: the connection failed. */
static bool write_next(conn *c, struct lws *wsi) {
  frame *f = queue_shift(&c->out);
  int n = lws_write(wsi, f->data + LWS_PRE, f->len, f->type);
  bool whole = n >= (int)f->len;
  free(f);
  if (!whole) {
    snprintf(c->why, sizeof c->why, "writing to the socket failed");
    c->failed = true;
  }
  return whole;
}

static int on_writeable(struct lws *wsi, conn *c) {
  if (c->out.head != NULL) {
    if (!write_next(c, wsi))
      return -1;
    if (c->out.head != NULL || c->close_wanted)
      lws_callback_on_writable(wsi);
    return 0;
  }
  if (c->close_wanted && !c->close_sent) {
    /* Our close frame is written here. Returning -1 after lws_close_reason() would be the
     * documented way, but lws 4.1's libuv event library runs its close twice ("uv repeat
     * test") and the second run drops the socket before the frame goes out. lws_write()
     * encodes a close frame for opcode 4 (lws's own LWS_WRITE_CLOSE, left out of the public
     * enum); the peer's echo then ends the connection, or lws's timeout does. */
    unsigned char buf[LWS_PRE + 2];
    buf[LWS_PRE] = (unsigned char)((c->close_code >> 8) & 0xff);
    buf[LWS_PRE + 1] = (unsigned char)(c->close_code & 0xff);
    c->close_sent = true;
    if (lws_write(wsi, buf + LWS_PRE, 2, (enum lws_write_protocol)SB_LWS_WRITE_CLOSE) < 2)
      return -1;
    lws_set_timeout(wsi, PENDING_TIMEOUT_CLOSE_ACK, 5);
  }
  return 0;
}

/* Frames queued by Lua go out in the same loop turn, right after the poll phase, instead of
 * waiting for lws's writable callback a turn later: a Socket Mode ack must not queue behind
 * the work the next turn starts (a spawn under load costs milliseconds). This runs outside
 * every lws callback; lws_write() buffers what the socket does not take and asks for
 * POLLOUT itself, and a choked socket is left to the writable callback. */
static void flush_queued(uv_check_t *h) {
  bool pending = false;
  for (conn *c = S.live; c != NULL; c = c->next) {
    while (c->state == ST_OPEN && c->wsi != NULL && c->out.head != NULL &&
           !lws_send_pipe_choked(c->wsi)) {
      if (!write_next(c, c->wsi)) {
        lws_set_timeout(c->wsi, PENDING_TIMEOUT_USER_OK, LWS_TO_KILL_ASYNC);
        break;
      }
    }
    if (c->out.head != NULL && c->wsi != NULL) {
      pending = true;
      lws_callback_on_writable(c->wsi);
    }
  }
  if (!pending)
    uv_check_stop(h);
}

static int on_lws(struct lws *wsi, enum lws_callback_reasons reason, void *user, void *in,
                  size_t len) {
  conn *c = lws_get_opaque_user_data(wsi);
  switch (reason) {
  case LWS_CALLBACK_CLIENT_ESTABLISHED:
    if (c == NULL)
      return -1;
    c->state = c->close_wanted ? ST_CLOSING : ST_OPEN;
    if (c->out.head != NULL || c->close_wanted)
      lws_callback_on_writable(wsi);
    if (c->w != NULL && c->w->kind == WAIT_CONNECT) {
      lua_State *task = wait_end(c);
      lua_rawgeti(task, LUA_REGISTRYINDEX, c->ud_ref);
      luaL_unref(sb_main_state(), LUA_REGISTRYINDEX, c->ud_ref);
      c->ud_ref = LUA_NOREF;
      sb_task_complete(task, 1);
    }
    return 0;
  case LWS_CALLBACK_CLIENT_RECEIVE:
    return c == NULL ? -1 : on_receive(wsi, c, in, len);
  case LWS_CALLBACK_CLIENT_RECEIVE_PONG:
    if (c != NULL)
      c->last_pong_ms = sb_now_ms();
    return 0;
  case LWS_CALLBACK_CLIENT_WRITEABLE:
    return c == NULL ? -1 : on_writeable(wsi, c);
  case LWS_CALLBACK_WS_PEER_INITIATED_CLOSE:
    if (c != NULL && len >= 2 && !c->close_sent) {
      const unsigned char *p = in;
      c->peer_code = (p[0] << 8) | p[1];
      snprintf(c->why, sizeof c->why, "the peer closed the connection (code %d)", c->peer_code);
    }
    return 0; /* lws echoes the close */
  case LWS_CALLBACK_CLIENT_CONNECTION_ERROR:
    if (c != NULL) {
      char why[140];
      snprintf(why, sizeof why, "%s", in != NULL ? (const char *)in : "connection error");
      c->failed = true;
      detach(wsi, c, why);
    }
    return 0;
  case LWS_CALLBACK_CLIENT_CLOSED:
    if (c != NULL) {
      bool clean = c->close_sent || c->peer_code != 0;
      c->failed = c->failed || !clean;
      detach(wsi, c, clean ? "the connection closed" : "the connection dropped without a close frame");
    }
    return 0;
  case LWS_CALLBACK_WSI_DESTROY:
    if (c != NULL) {
      c->failed = c->failed || !c->close_sent;
      detach(wsi, c, "the connection was dropped");
    }
    return 0;
  default:
    return 0;
  }
}

static const struct lws_protocols protocols[] = {
    {"sb-ws", on_lws, 0, 0, 0, NULL, 0},
    {NULL, NULL, 0, 0, 0, NULL, 0},
};

static bool ensure_context(void) {
  if (S.ctx != NULL)
    return true;
  if (S.shutting_down)
    return false;
  lws_set_log_level(0, NULL); /* errors come back as values; lws's lines could name a URL */
  struct lws_context_creation_info info;
  memset(&info, 0, sizeof info);
  void *loops[1] = {sb_loop()};
  info.options = LWS_SERVER_OPTION_LIBUV | LWS_SERVER_OPTION_DO_SSL_GLOBAL_INIT |
                 LWS_SERVER_OPTION_UV_NO_SIGSEGV_SIGFPE_SPIN;
  info.foreign_loops = loops; /* only read during creation */
  info.port = CONTEXT_PORT_NO_LISTEN;
  info.protocols = protocols;
  info.fd_limit_per_thread = 256; /* lws's own sockets, not the process's */
  info.timeout_secs = 30;         /* lws's handshake timeout; callers' deadlines are shorter */
  S.ctx = lws_create_context(&info);
  if (S.ctx != NULL && !S.flusher_ready) {
    uv_check_init(sb_loop(), &S.flusher);
    S.flusher_ready = true;
  }
  return S.ctx != NULL;
}

static void ws_shutdown(void *ud) {
  (void)ud;
  /* No task is resumed from here on: waits end silently (their tasks are never resumed
   * again; the engine is going away), then lws closes every connection. */
  S.shutting_down = true;
  for (conn *c = S.live; c != NULL; c = c->next) {
    if (c->w == NULL)
      continue;
    if (c->w->kind == WAIT_CONNECT) {
      luaL_unref(sb_main_state(), LUA_REGISTRYINDEX, c->ud_ref);
      c->ud_ref = LUA_NOREF;
    }
    (void)wait_end(c);
  }
  if (S.flusher_ready) {
    S.flusher_ready = false;
    uv_close((uv_handle_t *)&S.flusher, NULL);
  }
  if (S.ctx == NULL)
    return;
  struct lws_context *ctx = S.ctx;
  S.ctx = NULL;
  lws_context_destroy(ctx); /* closes every wsi (callbacks detach them) and lws's handles */
  if (sb_loop() != NULL)
    uv_run(sb_loop(), UV_RUN_NOWAIT); /* lets lws's close callbacks finish the destroy */
}

/* ---- waiting ------------------------------------------------------------------------------ */

/* A connect that ends before it connected (its deadline, an abort): the handle no longer keeps
 * the userdata alive, and libwebsockets drops the half-made connection at its next turn. */
static void abandon_connect(conn *c) {
  luaL_unref(sb_main_state(), LUA_REGISTRYINDEX, c->ud_ref);
  c->ud_ref = LUA_NOREF;
  c->close_wanted = true;
  if (c->wsi != NULL)
    lws_set_timeout(c->wsi, PENDING_TIMEOUT_AWAITING_PROXY_RESPONSE, LWS_TO_KILL_ASYNC);
}

/* Ends a wait that did not get its news: the deadline passed (sig NULL) or `sig` fired. */
static void wait_fail(waiter *w, sb_abort *sig) {
  conn *c = w->c;
  if (c == NULL)
    return;
  wait_kind kind = w->kind;
  lua_State *task = wait_end(c);
  if (kind == WAIT_CONNECT)
    abandon_connect(c);
  if (sig != NULL)
    sb_task_complete(task, sb_abort_push_fail(task, sig));
  else
    sb_task_complete(task, sb_push_fail(task, "timeout",
                                        kind == WAIT_CONNECT
                                            ? "websocket connect: the deadline passed"
                                            : "websocket recv: the deadline passed"));
  conn_free_if_unused(c);
}

static void wait_timed_out(uv_timer_t *t) { wait_fail(t->data, NULL); }

static void wait_aborted(sb_abort_listener *l, sb_abort *sig) {
  wait_fail((waiter *)((char *)l - offsetof(waiter, on_abort)), sig);
}

/* Yields L until the connection has news; the signal is at index sig_idx (or absent). */
static int wait_start(lua_State *L, conn *c, wait_kind kind, double deadline_ms, int sig_idx) {
  waiter *w = sb_calloc(L, 1, sizeof *w);
  w->c = c;
  w->task = L;
  w->kind = kind;
  w->signal_ref = LUA_NOREF;
  uv_timer_init(sb_loop(), &w->timer);
  w->timer.data = w;
  c->w = w;
  if (deadline_ms >= 0)
    sb_timer_start(&w->timer, wait_timed_out, (uint64_t)deadline_ms);
  sb_abort *sig = sig_idx ? sb_abort_opt(L, sig_idx) : NULL;
  if (sig != NULL) {
    lua_pushvalue(L, sig_idx);
    w->signal_ref = luaL_ref(L, LUA_REGISTRYINDEX);
    sb_abort_listen(sig, &w->on_abort, wait_aborted);
  }
  return sb_task_yield(L);
}

/* ---- Lua API ------------------------------------------------------------------------------ */

static conn *check_conn(lua_State *L) {
  conn **ud = luaL_checkudata(L, 1, CONN_MT);
  luaL_argcheck(L, *ud != NULL, 1, "a websocket connection expected");
  return *ud;
}

static double opt_ms(lua_State *L, int t, const char *field) {
  lua_getfield(L, t, field);
  double ms = -1;
  if (!lua_isnil(L, -1)) {
    ms = luaL_checknumber(L, -1);
    if (ms < 0 || ms > 1e10)
      luaL_error(L, "%s must be milliseconds between 0 and 1e10", field);
  }
  lua_pop(L, 1);
  return ms;
}

static int l_connect(lua_State *L) {
  luaL_checktype(L, 1, LUA_TTABLE);
  lua_getfield(L, 1, "url");
  size_t url_len;
  const char *url = luaL_checklstring(L, -1, &url_len);
  if (url_len > 4096)
    return luaL_error(L, "core.ws.connect: url is too long");
  char buf[4100];
  memcpy(buf, url, url_len + 1);
  lua_pop(L, 1);
  double deadline = opt_ms(L, 1, "deadline_ms");
  lua_getfield(L, 1, "max_message");
  lua_Integer max_message = luaL_optinteger(L, -1, DEFAULT_MAX_MESSAGE);
  lua_pop(L, 1);
  luaL_argcheck(L, max_message > 0 && max_message <= (1 << 30), 1, "max_message: 1 B to 1 GiB");
  lua_getfield(L, 1, "signal"); /* index 2 from here on */
  lua_settop(L, 2);
  sb_abort *sig = sb_abort_opt(L, 2);
  sb_task_check(L, "core.ws.connect");

  const char *prot = NULL, *addr = NULL, *path = NULL;
  int port = 0;
  if (lws_parse_uri(buf, &prot, &addr, &port, &path) != 0 ||
      (strcmp(prot, "ws") != 0 && strcmp(prot, "wss") != 0) || addr[0] == '\0')
    return sb_push_fail(L, "invalid", "core.ws.connect: the url must be ws://HOST[:PORT]/PATH "
                                      "or wss://HOST[:PORT]/PATH");
  bool tls = strcmp(prot, "wss") == 0;
  if (addr[0] == '+' || port <= 0 || port > 65535)
    return sb_push_fail(L, "invalid", "core.ws.connect: the url names no usable host and port");
  char full_path[4100];
  snprintf(full_path, sizeof full_path, "%s%s", path[0] == '/' ? "" : "/", path);
  if (sig != NULL && sb_abort_fired(sig))
    return sb_abort_push_fail(L, sig);
  if (!ensure_context())
    return sb_push_fail(L, "transport", "websocket: libwebsockets could not start (is the "
                                        "libwebsockets-evlib-uv package installed?)");

  conn *c = sb_calloc(L, 1, sizeof *c);
  c->state = ST_CONNECTING;
  c->lua_alive = true;
  c->max_message = (size_t)max_message;
  c->ud_ref = LUA_NOREF;
  SB_LIST_PUSH(S.live, c);
  conn **ud = lua_newuserdatauv(L, sizeof *ud, 0);
  *ud = c;
  luaL_setmetatable(L, CONN_MT);

  struct lws_client_connect_info ci;
  memset(&ci, 0, sizeof ci);
  ci.context = S.ctx;
  ci.address = addr;
  ci.port = port;
  ci.path = full_path;
  ci.host = addr;
  ci.origin = addr;
  ci.ssl_connection = tls ? LCCSCF_USE_SSL : 0;
  ci.local_protocol_name = "sb-ws";
  ci.opaque_user_data = c;
  ci.pwsi = &c->wsi;
  ci.ietf_version_or_minus_one = -1;
  struct lws *wsi = lws_client_connect_via_info(&ci);
  if (wsi == NULL || c->state == ST_CLOSED) {
    char msg[200];
    snprintf(msg, sizeof msg, "websocket connect failed: %s",
             c->why[0] ? c->why : "the connection could not be started");
    c->wsi = NULL;
    return sb_push_fail(L, "transport", msg);
  }
  lua_pushvalue(L, -1);
  c->ud_ref = luaL_ref(L, LUA_REGISTRYINDEX);
  return wait_start(L, c, WAIT_CONNECT, deadline, sig != NULL ? 2 : 0);
}

static int queue_frame(lua_State *L, conn *c, const char *bytes, size_t len,
                       enum lws_write_protocol type) {
  if (c->state != ST_OPEN && c->state != ST_CONNECTING)
    return push_closed(L, c);
  if (c->out.bytes + len > MAX_QUEUED_OUT)
    return sb_push_fail(L, "transport", "websocket: too many bytes queued to send (the peer "
                                        "is not reading)");
  frame *f = malloc(sizeof *f + LWS_PRE + len);
  if (f == NULL)
    return luaL_error(L, "out of memory");
  f->len = len;
  f->type = type;
  memcpy(f->data + LWS_PRE, bytes, len);
  queue_push(&c->out, f);
  if (c->state == ST_OPEN && c->wsi != NULL)
    uv_check_start(&S.flusher, flush_queued);
  lua_pushboolean(L, 1);
  return 1;
}

static int l_send(lua_State *L) {
  conn *c = check_conn(L);
  size_t len;
  const char *text = luaL_checklstring(L, 2, &len);
  return queue_frame(L, c, text, len, LWS_WRITE_TEXT);
}

static int l_ping(lua_State *L) {
  conn *c = check_conn(L);
  return queue_frame(L, c, "", 0, LWS_WRITE_PING);
}

static int l_recv(lua_State *L) {
  conn *c = check_conn(L);
  double deadline = -1;
  if (lua_istable(L, 2)) {
    deadline = opt_ms(L, 2, "deadline_ms");
    lua_getfield(L, 2, "signal");
  } else {
    lua_pushnil(L);
  }
  lua_replace(L, 2);
  lua_settop(L, 2);
  sb_abort *sig = sb_abort_opt(L, 2);
  sb_task_check(L, "conn:recv");
  if (c->w != NULL)
    return luaL_error(L, "conn:recv: another task is already waiting on this connection");
  frame *f = queue_shift(&c->in);
  if (f != NULL) {
    lua_pushlstring(L, (const char *)f->data, f->len);
    free(f);
    return 1;
  }
  /* Closing (our close frame sent or queued) still delivers what arrives until the peer's
   * echo: a Socket Mode connection being replaced may carry envelopes until then. */
  if (c->state == ST_CLOSED || c->discarding)
    return push_closed(L, c);
  if (sig != NULL && sb_abort_fired(sig))
    return sb_abort_push_fail(L, sig);
  if (deadline == 0)
    return sb_push_fail(L, "timeout", "websocket recv: the deadline passed");
  return wait_start(L, c, WAIT_RECV, deadline, sig != NULL ? 2 : 0);
}

static void request_close(conn *c, int code) {
  if (c->state == ST_CLOSED || c->close_wanted)
    return;
  c->close_wanted = true;
  c->close_code = code;
  if (c->state == ST_OPEN) {
    c->state = ST_CLOSING;
    lws_callback_on_writable(c->wsi);
  } else if (c->wsi != NULL) {
    lws_set_timeout(c->wsi, PENDING_TIMEOUT_AWAITING_PROXY_RESPONSE, LWS_TO_KILL_ASYNC);
  }
  if (c->why[0] == '\0')
    snprintf(c->why, sizeof c->why, "closed by this side");
}

static int l_close(lua_State *L) {
  conn *c = check_conn(L);
  lua_Integer code = luaL_optinteger(L, 2, LWS_CLOSE_STATUS_NORMAL);
  luaL_argcheck(L, code >= 1000 && code <= 4999, 2, "a close code 1000-4999 expected");
  request_close(c, (int)code);
  lua_pushboolean(L, 1);
  return 1;
}

static int l_state(lua_State *L) {
  static const char *const names[] = {"connecting", "open", "closing", "closed"};
  conn *c = check_conn(L);
  lua_pushstring(L, names[c->state]);
  return 1;
}

static int l_last_pong_ms(lua_State *L) {
  conn *c = check_conn(L);
  if (c->last_pong_ms > 0)
    lua_pushnumber(L, c->last_pong_ms);
  else
    lua_pushnil(L);
  return 1;
}

static int l_gc(lua_State *L) {
  conn **ud = luaL_checkudata(L, 1, CONN_MT);
  conn *c = *ud;
  *ud = NULL;
  if (c == NULL)
    return 0;
  c->lua_alive = false;
  if (c->wsi != NULL)
    request_close(c, LWS_CLOSE_STATUS_GOINGAWAY);
  conn_free_if_unused(c);
  return 0;
}

int sb_ws_open(lua_State *L) {
  if (!sb_shutdown_register(ws_shutdown, NULL))
    return luaL_error(L, "out of memory");
  static const luaL_Reg methods[] = {
      {"send", l_send},   {"ping", l_ping},   {"recv", l_recv},
      {"close", l_close}, {"state", l_state}, {"last_pong_ms", l_last_pong_ms},
      {NULL, NULL},
  };
  static const luaL_Reg meta[] = {{"__gc", l_gc}, {NULL, NULL}};
  sb_class_register(L, &(sb_class){CONN_MT, methods, NULL, meta});
  static const luaL_Reg fns[] = {{"connect", l_connect}, {NULL, NULL}};
  sb_module_table(L, "ws", fns);
  return 0;
}
