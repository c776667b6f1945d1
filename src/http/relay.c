/* core.http.connect and res:relay: a raw TCP connection to an upstream (sandboxd's port proxy,
 * docs/sandboxd.md "Ports") and the byte relay between it and a server connection.
 *
 *   local up, err = core.http.connect{port = n, host = "127.0.0.1", netns = path?}
 *   up:write(bytes)          → true | false (queued; false once the connection failed)
 *   up:read([deadline_ms])   → bytes | nil (EOF) | nil, err (kind timeout | transport)
 *   up:close()
 *   res:relay(up, status, head) (server.c) → true once both ends are done
 *
 * netns: the socket is made inside that network namespace (a socket belongs to the namespace it
 * was made in; sb_socket_in_netns) and connected there — how sandboxd reaches 127.0.0.1:<port>
 * of an instance that has a network namespace of its own.
 *
 * The relay moves bytes both ways without looking at them: what the upstream sends goes to the
 * client, what the client sends goes to the upstream, each direction paused while the other
 * side has more than SB_HTTP_DRAIN_MARK queued (a client that takes nothing for the request
 * timeout is let go, as any slow reader). It ends when either side ends: the client's
 * connection is flushed and closed, the upstream's closed.
 *
 * Ownership: an upstream is malloc'd; its userdata points to it. The handle closes on
 * up:close(), the relay's end or __gc, and the memory goes with whichever of the close callback
 * and __gc comes last. A relay is owned by itself from res:relay to its end; it anchors the
 * upstream's userdata meanwhile. */
#include "relay.h"
#include "../engine/engine.h"
#include "../engine/list.h"

#include <errno.h>
#include <fcntl.h>
#include <sched.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <unistd.h>
#include <lauxlib.h>

#define UPSTREAM_MT "switchboard.http.upstream"

enum { READ_BYTES = 64 * 1024 };

typedef struct relay relay;

struct sb_upstream {
  uv_tcp_t tcp;
  uv_connect_t connect;
  uv_timer_t timer;      /* a read's deadline */
  uint8_t handles_open;  /* tcp and timer: 2 → 0 as they close */
  bool closing;          /* uv_close was called */
  bool gc;               /* the userdata is gone */
  bool failed;           /* a write or read failed: the connection is over */
  lua_State *waiter;     /* a task in connect or read */
  relay *relay;
  sb_upstream *prev, *next; /* the live list, until both handles closed */
  char buf[READ_BYTES];
};

typedef struct {
  sb_upstream *u;
} upstream_ud;

struct relay {
  sb_http_conn *c; /* NULL once the client's connection closed */
  sb_upstream *u;
  lua_State *task;
  int up_ref;
  bool up_paused, ended;
};

typedef struct {
  uv_write_t req;
  relay *r; /* the relay the write belongs to, or NULL */
  sb_upstream *u;
  char data[];
} up_write;

/* ---- the socket ---------------------------------------------------------------------------- */

int sb_socket_in_netns(int netns_fd, int family, int type, int protocol) {
  if (netns_fd < 0)
    return socket(family, type | SOCK_CLOEXEC, protocol);
  int own = open("/proc/thread-self/ns/net", O_RDONLY | O_CLOEXEC);
  if (own < 0)
    return -1;
  int s = -1;
  if (setns(netns_fd, CLONE_NEWNET) == 0) {
    s = socket(family, type | SOCK_CLOEXEC, protocol);
    int saved = errno;
    if (setns(own, CLONE_NEWNET) != 0)
      abort(); /* left in another namespace: every later socket of this thread would be its */
    errno = saved;
  }
  close(own);
  return s;
}

/* ---- the upstream -------------------------------------------------------------------------- */

/* Every upstream whose handles are open: at engine shutdown they are closed with our own
 * callback (before the engine's walk would close them without one), so that their memory is
 * freed whichever of the close callback and __gc comes last. */
static sb_upstream *live;
static bool shutdown_registered;

static void live_remove(sb_upstream *u) { SB_LIST_REMOVE(live, u); }

static void upstream_handle_closed(uv_handle_t *h) {
  sb_upstream *u = h->data;
  if (--u->handles_open > 0)
    return;
  live_remove(u);
  if (u->gc)
    free(u);
}

static void upstream_close(sb_upstream *u) {
  if (u->closing)
    return;
  u->closing = true;
  /* the engine's shutdown walk may have closed them already (then without our callback: the
   * memory is the process's to drop as it exits) */
  if (!uv_is_closing((uv_handle_t *)&u->tcp))
    uv_close((uv_handle_t *)&u->tcp, upstream_handle_closed);
  if (!uv_is_closing((uv_handle_t *)&u->timer))
    uv_close((uv_handle_t *)&u->timer, upstream_handle_closed);
}

static sb_upstream *check_up(lua_State *L, int idx) {
  upstream_ud *ud = luaL_checkudata(L, idx, UPSTREAM_MT);
  if (ud->u == NULL)
    luaL_error(L, "the upstream connection is gone");
  return ud->u;
}

sb_upstream *sb_upstream_check(lua_State *L, int idx) { return check_up(L, idx); }

static void wake(sb_upstream *u, int nres) {
  lua_State *t = u->waiter;
  u->waiter = NULL;
  uv_timer_stop(&u->timer);
  sb_task_complete(t, nres);
}

static void connected(uv_connect_t *req, int status) {
  sb_upstream *u = req->data;
  if (u->waiter == NULL)
    return;
  lua_State *t = u->waiter;
  if (status != 0) {
    u->failed = true;
    char msg[160];
    snprintf(msg, sizeof msg, "cannot connect: %s", uv_strerror(status));
    lua_pushnil(t);
    sb_error_push(t, "transport", msg);
    lua_pushboolean(t, status == UV_ECONNREFUSED);
    lua_setfield(t, -2, "not_sent");
    wake(u, 2);
    return;
  }
  lua_pushvalue(t, -1); /* the upstream's userdata, left on the task's stack by l_connect */
  wake(u, 1);
}

/* core.http.connect{port, host?, netns?} */
static int l_connect(lua_State *L) {
  sb_task_check(L, "core.http.connect");
  luaL_checktype(L, 1, LUA_TTABLE);
  lua_getfield(L, 1, "port");
  lua_Integer port = luaL_checkinteger(L, -1);
  luaL_argcheck(L, port >= 1 && port <= 65535, 1, "port must be 1-65535");
  lua_getfield(L, 1, "host");
  const char *host = luaL_optstring(L, -1, "127.0.0.1");
  lua_getfield(L, 1, "netns");
  const char *netns = luaL_optstring(L, -1, NULL);
  struct sockaddr_in addr;
  if (uv_ip4_addr(host, (int)port, &addr) != 0)
    return luaL_error(L, "core.http.connect: host must be an IPv4 address");
  lua_settop(L, 1);

  int ns = -1;
  if (netns != NULL && (ns = open(netns, O_RDONLY | O_CLOEXEC)) < 0)
    return sb_push_fail(L, "transport", "cannot open the network namespace to connect in");
  int fd = sb_socket_in_netns(ns, AF_INET, SOCK_STREAM | SOCK_NONBLOCK, 0);
  int saved = errno;
  if (ns >= 0)
    close(ns);
  if (fd < 0) {
    char msg[160];
    snprintf(msg, sizeof msg, "cannot make a socket there: %s", strerror(saved));
    return sb_push_fail(L, "transport", msg);
  }
  sb_upstream *u = calloc(1, sizeof *u);
  if (u == NULL) {
    close(fd);
    return sb_push_fail(L, "transport", "out of memory");
  }
  uv_tcp_init(sb_loop(), &u->tcp);
  uv_timer_init(sb_loop(), &u->timer);
  u->tcp.data = u->timer.data = u->connect.data = u;
  u->handles_open = 2;
  SB_LIST_PUSH(live, u);
  upstream_ud *ud = lua_newuserdatauv(L, sizeof *ud, 0);
  ud->u = u;
  luaL_setmetatable(L, UPSTREAM_MT);
  int err = uv_tcp_open(&u->tcp, fd);
  if (err != 0)
    close(fd); /* not the handle's: its close would leave it open */
  else
    err = uv_tcp_connect(&u->connect, &u->tcp, (const struct sockaddr *)&addr, connected);
  if (err != 0) { /* the userdata's __gc closes the handles */
    u->failed = true;
    char msg[160];
    snprintf(msg, sizeof msg, "cannot connect: %s", uv_strerror(err));
    return sb_push_fail(L, "transport", msg);
  }
  u->waiter = L;
  return sb_task_yield(L);
}

static void write_done(uv_write_t *req, int status);

/* Queues bytes to the upstream (tried at once without a copy). false: it failed. */
static bool upstream_write(sb_upstream *u, relay *r, const char *data, size_t len) {
  if (u->closing || u->failed)
    return false;
  if (len == 0)
    return true;
  uv_buf_t buf = uv_buf_init((char *)data, (unsigned)len);
  if (uv_stream_get_write_queue_size((uv_stream_t *)&u->tcp) == 0) {
    int n = uv_try_write((uv_stream_t *)&u->tcp, &buf, 1);
    if (n < 0 && n != UV_EAGAIN) {
      u->failed = true;
      return false;
    }
    if (n > 0) {
      data += n;
      len -= (size_t)n;
    }
    if (len == 0)
      return true;
  }
  up_write *w = malloc(sizeof *w + len);
  if (w == NULL) {
    u->failed = true;
    return false;
  }
  memcpy(w->data, data, len);
  w->r = r;
  w->u = u;
  w->req.data = w;
  buf = uv_buf_init(w->data, (unsigned)len);
  if (uv_write(&w->req, (uv_stream_t *)&u->tcp, &buf, 1, write_done) != 0) {
    free(w);
    u->failed = true;
    return false;
  }
  return true;
}

static int l_up_write(lua_State *L) {
  sb_upstream *u = check_up(L, 1);
  size_t n;
  const char *data = luaL_checklstring(L, 2, &n);
  lua_pushboolean(L, upstream_write(u, NULL, data, n));
  return 1;
}

static void alloc_up(uv_handle_t *h, size_t suggested, uv_buf_t *buf) {
  (void)suggested;
  sb_upstream *u = h->data;
  *buf = uv_buf_init(u->buf, sizeof u->buf);
}

static void read_once(uv_stream_t *s, ssize_t nread, const uv_buf_t *buf) {
  sb_upstream *u = s->data;
  if (nread == 0 || u->waiter == NULL)
    return;
  uv_read_stop(s);
  lua_State *t = u->waiter;
  if (nread == UV_EOF) {
    lua_pushnil(t);
    wake(u, 1);
  } else if (nread < 0) {
    u->failed = true;
    lua_pushnil(t);
    sb_error_push(t, "transport", uv_strerror((int)nread));
    wake(u, 2);
  } else {
    lua_pushlstring(t, buf->base, (size_t)nread);
    wake(u, 1);
  }
}

static void read_timed_out(uv_timer_t *t) {
  sb_upstream *u = t->data;
  if (u->waiter == NULL)
    return;
  uv_read_stop((uv_stream_t *)&u->tcp);
  lua_State *task = u->waiter;
  lua_pushnil(task);
  sb_error_push(task, "timeout", "the upstream sent nothing within the deadline");
  wake(u, 2);
}

static int l_up_read(lua_State *L) {
  sb_upstream *u = check_up(L, 1);
  lua_Integer deadline = luaL_optinteger(L, 2, 0);
  sb_task_check(L, "upstream:read");
  if (u->waiter != NULL || u->relay != NULL)
    return luaL_error(L, "upstream:read: the connection is being read already");
  if (u->closing || u->failed)
    return sb_push_fail(L, "transport", "the upstream connection is closed");
  if (uv_read_start((uv_stream_t *)&u->tcp, alloc_up, read_once) != 0)
    return sb_push_fail(L, "transport", "the upstream connection is closed");
  if (deadline > 0)
    sb_timer_start(&u->timer, read_timed_out, (uint64_t)deadline);
  u->waiter = L;
  return sb_task_yield(L);
}

static int l_up_close(lua_State *L) {
  sb_upstream *u = check_up(L, 1);
  if (u->relay == NULL && u->waiter == NULL)
    upstream_close(u);
  return 0;
}

static int l_up_gc(lua_State *L) {
  upstream_ud *ud = luaL_checkudata(L, 1, UPSTREAM_MT);
  sb_upstream *u = ud->u;
  if (u == NULL)
    return 0;
  ud->u = NULL;
  u->gc = true;
  if (u->handles_open == 0)
    free(u);
  else
    upstream_close(u);
  return 0;
}

/* ---- the relay ----------------------------------------------------------------------------- */

static void relay_end(relay *r) {
  if (r->ended)
    return;
  r->ended = true;
  if (r->c != NULL) {
    sb_http_conn *c = r->c;
    r->c = NULL;
    c->tap = NULL;
    c->tap_ud = NULL;
    sb_http_conn_end(c); /* what is queued is flushed first */
  }
  sb_upstream *u = r->u;
  u->relay = NULL;
  upstream_close(u);
  lua_State *L = sb_main_state();
  luaL_unref(L, LUA_REGISTRYINDEX, r->up_ref);
  lua_State *t = r->task;
  free(r);
  lua_pushboolean(t, 1);
  sb_task_complete(t, 1);
}

static void write_done(uv_write_t *req, int status) {
  up_write *w = req->data;
  relay *r = w->r;
  sb_upstream *u = w->u;
  free(w);
  if (status == UV_ECANCELED)
    return;
  if (status < 0) {
    u->failed = true;
    if (u->relay != NULL)
      relay_end(u->relay);
    return;
  }
  /* the client was paused while the upstream had too much queued */
  if (r != NULL && u->relay == r && r->c != NULL &&
      uv_stream_get_write_queue_size((uv_stream_t *)&u->tcp) <= SB_HTTP_DRAIN_MARK)
    sb_http_conn_read_pause(r->c, false);
}

static void relay_up_read(uv_stream_t *s, ssize_t nread, const uv_buf_t *buf) {
  sb_upstream *u = s->data;
  relay *r = u->relay;
  if (nread == 0 || r == NULL)
    return;
  if (nread < 0) { /* the upstream ended (EOF) or failed: so does the exchange */
    relay_end(r);
    return;
  }
  uv_buf_t out = uv_buf_init(buf->base, (unsigned)nread);
  if (!sb_http_conn_write(r->c, &out, 1))
    return; /* the client's connection closed: tap_closed ended the relay */
  if (sb_http_conn_queued(r->c) > SB_HTTP_DRAIN_MARK) {
    uv_read_stop(s);
    r->up_paused = true;
    sb_http_conn_stall_watch(r->c, true);
  }
}

static void tap_bytes(sb_http_conn *c, const char *data, size_t len) {
  relay *r = c->tap_ud;
  if (!upstream_write(r->u, r, data, len)) {
    relay_end(r);
    return;
  }
  if (uv_stream_get_write_queue_size((uv_stream_t *)&r->u->tcp) > SB_HTTP_DRAIN_MARK)
    sb_http_conn_read_pause(c, true);
}

static void tap_eof(sb_http_conn *c) { relay_end(c->tap_ud); }

static void tap_drained(sb_http_conn *c) {
  relay *r = c->tap_ud;
  if (!r->up_paused)
    return;
  r->up_paused = false;
  sb_http_conn_stall_watch(c, false);
  if (uv_read_start((uv_stream_t *)&r->u->tcp, alloc_up, relay_up_read) != 0)
    relay_end(r);
}

static void tap_closed(sb_http_conn *c) {
  relay *r = c->tap_ud;
  r->c = NULL; /* (closing already: nothing to flush) */
  relay_end(r);
}

static const sb_http_tap relay_tap = {
    .on_bytes = tap_bytes, .on_eof = tap_eof, .on_drained = tap_drained, .on_closed = tap_closed};

int sb_relay_start(lua_State *L, sb_http_conn *c, int up_idx, const char *head, size_t len) {
  sb_upstream *u = check_up(L, up_idx);
  if (u->closing || u->failed || u->waiter != NULL || u->relay != NULL) {
    sb_http_conn_close(c);
    lua_pushboolean(L, 0);
    return 1;
  }
  uv_buf_t buf = uv_buf_init((char *)head, (unsigned)len);
  if (!sb_http_conn_write(c, &buf, 1)) {
    lua_pushboolean(L, 0);
    return 1;
  }
  relay *r = calloc(1, sizeof *r);
  if (r == NULL) {
    sb_http_conn_close(c);
    lua_pushboolean(L, 0);
    return 1;
  }
  r->c = c;
  r->u = u;
  r->task = L;
  lua_pushvalue(L, up_idx);
  r->up_ref = luaL_ref(L, LUA_REGISTRYINDEX);
  u->relay = r;
  c->tap = &relay_tap;
  c->tap_ud = r;
  /* the client's bytes that came after its request's head (a WebSocket's first frames) */
  size_t n;
  char *early = sb_http_conn_take_pending(c, &n);
  bool ok = upstream_write(u, r, early, n);
  free(early);
  if (ok && uv_read_start((uv_stream_t *)&u->tcp, alloc_up, relay_up_read) != 0)
    ok = false;
  if (!ok) { /* undone here: the task has not yielded, so it is not completed */
    c->tap = NULL;
    c->tap_ud = NULL;
    u->relay = NULL;
    luaL_unref(L, LUA_REGISTRYINDEX, r->up_ref);
    free(r);
    upstream_close(u);
    sb_http_conn_end(c);
    lua_pushboolean(L, 0);
    return 1;
  }
  sb_http_conn_read_pause(c, false);
  return sb_task_yield(L);
}

static void relay_shutdown(void *ud) {
  (void)ud;
  for (sb_upstream *u = live; u != NULL; u = u->next)
    upstream_close(u);
}

void sb_http_relay_open(lua_State *L) {
  if (!shutdown_registered)
    shutdown_registered = sb_shutdown_register(relay_shutdown, NULL);
  static const luaL_Reg methods[] = {
      {"write", l_up_write}, {"read", l_up_read}, {"close", l_up_close}, {NULL, NULL}};
  static const luaL_Reg meta[] = {{"__gc", l_up_gc}, {NULL, NULL}};
  sb_class_register(L, &(sb_class){UPSTREAM_MT, methods, NULL, meta});
  static const luaL_Reg fns[] = {{"connect", l_connect}, {NULL, NULL}};
  sb_module_table(L, "http", fns);
}
