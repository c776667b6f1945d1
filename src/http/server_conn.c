/* The HTTP server's connections (see server_conn.h for the phases). */
#include "server_conn.h"
#include "server_response.h"
#include "tcp_progress.h"
#include "../engine/engine.h"
#include "../log/log.h"

#include <stdio.h>
#include <sys/ioctl.h>
#include <stdlib.h>
#include <string.h>

enum {
  BACKLOG = 511,
  READ_BUFFER_BYTES = 64 * 1024,
  LINGER_MS = 2000, /* after our FIN: how long input is drained so the peer reads our answer */
};

/* What the connection's single timer means when it fires. */
enum { TIMER_NONE, TIMER_REQUEST, TIMER_IDLE, TIMER_NEXT, TIMER_FLUSH, TIMER_LINGER, TIMER_STALL };

/* Every read lands here and is parsed (or copied) before the next read is allocated, so one
 * buffer serves every connection and an idle connection holds none. */
static char read_buffer[READ_BUFFER_BYTES];

typedef struct {
  uv_write_t req;
  char data[];
} write_req;

static size_t conn_consume(sb_http_conn *c, const char *data, size_t len);
static void start_reading(sb_http_conn *c);

/* ---- logging ----------------------------------------------------------------------------- */

/* Peers are named by address and port only; nothing they sent (headers!) is ever logged. */
static void log_conn(const char *level, const char *event, const sb_http_conn *c,
                     const char *key, const char *value) {
  char port[8];
  snprintf(port, sizeof port, "%u", (unsigned)c->remote_port);
  sb_log_field f[] = {{"remote", c->remote_addr, false}, {"port", port, true},
                      {key, value, false}};
  sb_log_write(level, event, f, key != NULL ? 3 : 2);
}

/* One line per second at most for a kind of event that floods bring by the thousand, with the
 * count since the last line. */
static void tally(sb_http_tally *t, const char *event, const char *reason, const char *detail) {
  t->count++;
  uint64_t now = uv_now(sb_loop());
  if (t->logged_at != 0 && now - t->logged_at < 1000)
    return;
  char count[24];
  snprintf(count, sizeof count, "%llu", (unsigned long long)t->count);
  sb_log_field f[] = {{"reason", reason, false}, {"count", count, true}, {"error", detail, false}};
  sb_log_write("warn", event, f, detail != NULL ? 3 : 2);
  t->count = 0;
  t->logged_at = now;
}

/* ---- per-peer counts --------------------------------------------------------------------- */

static sb_http_peer **peer_bucket(sb_http_server *s, const char *addr) {
  uint32_t h = 2166136261u;
  for (const char *p = addr; *p; p++)
    h = (h ^ (unsigned char)*p) * 16777619u;
  return &s->peers[h % SB_HTTP_PEER_BUCKETS];
}

/* The entry of `addr` (created at 0 connections), or NULL when out of memory. */
static sb_http_peer *peer_get(sb_http_server *s, const char *addr) {
  sb_http_peer **b = peer_bucket(s, addr);
  for (sb_http_peer *p = *b; p != NULL; p = p->next)
    if (strcmp(p->addr, addr) == 0)
      return p;
  sb_http_peer *p = calloc(1, sizeof *p);
  if (p == NULL)
    return NULL;
  snprintf(p->addr, sizeof p->addr, "%s", addr);
  p->next = *b;
  *b = p;
  return p;
}

static void peer_drop(sb_http_server *s, sb_http_conn *c) {
  sb_http_peer *p = c->peer;
  c->peer = NULL;
  if (p == NULL || --p->conns > 0)
    return;
  for (sb_http_peer **at = peer_bucket(s, p->addr); *at != NULL; at = &(*at)->next)
    if (*at == p) {
      *at = p->next;
      free(p);
      return;
    }
}

static void peers_free(sb_http_server *s) {
  for (size_t i = 0; i < SB_HTTP_PEER_BUCKETS; i++)
    while (s->peers[i] != NULL) {
      sb_http_peer *p = s->peers[i];
      s->peers[i] = p->next;
      free(p);
    }
}

/* ---- the body pool ----------------------------------------------------------------------- */

/* Admits the current request's body against max_bodies_bytes; false when it does not fit. */
static bool body_reserve(sb_http_conn *c) {
  sb_http_server *s = c->server;
  size_t want = sb_http_request_body_bound(&c->req);
  if (want > s->limits.max_bodies_bytes - s->bodies_reserved)
    return false;
  s->bodies_reserved += want;
  c->body_reserved = want;
  return true;
}

static void body_release(sb_http_conn *c) {
  c->server->bodies_reserved -= c->body_reserved;
  c->body_reserved = 0;
}

/* ---- server bookkeeping ------------------------------------------------------------------ */

static void server_maybe_closed(sb_http_server *s) {
  if (s->listener_closed && s->conns == NULL)
    s->up->on_server_closed(s); /* may free s */
}

static void conn_free(sb_http_conn *c) {
  sb_http_server *s = c->server;
  if (c->prev != NULL)
    c->prev->next = c->next;
  else
    s->conns = c->next;
  if (c->next != NULL)
    c->next->prev = c->prev;
  else
    s->conns_tail = c->prev;
  s->n_conns--;
  body_release(c);
  peer_drop(s, c);
  sb_http_request_free(&c->req);
  free(c->pending);
  free(c);
  server_maybe_closed(s);
}

static void handle_closed(uv_handle_t *h) {
  sb_http_conn *c = h->data;
  if (--c->handles_open == 0)
    conn_free(c);
}

/* ---- timers ------------------------------------------------------------------------------ */

static void timer_fired(uv_timer_t *t);

static void arm(sb_http_conn *c, int role, uint64_t ms) {
  c->timer_role = (uint8_t)role;
  sb_timer_start(&c->timer, timer_fired, ms);
}

static void disarm(sb_http_conn *c) {
  c->timer_role = TIMER_NONE;
  uv_timer_stop(&c->timer);
}

/* The bytes the peer has taken of what we sent (0 when the socket cannot say). */
static uint64_t peer_taken(const sb_http_conn *c) {
  uv_os_fd_t fd;
  uint64_t acked = 0;
  if (uv_fileno((const uv_handle_t *)&c->tcp, &fd) != 0 || !sb_tcp_bytes_acked(fd, &acked))
    return 0;
  return acked;
}

/* Arms a timer that ends a peer which takes none of our bytes for request_timeout_ms (STALL:
 * a response waiting on it; FLUSH: our last bytes). What the peer took is counted by the
 * kernel and checked when the timer fires (peer_stalled): the loop runs due timers before it
 * polls the sockets, so after this process was itself held up (a loaded host, a paused VM) the
 * timer fires before the loop has seen what the peer read meanwhile. */
static void arm_peer_watch(sb_http_conn *c, int role) {
  c->taken_at_arm = peer_taken(c);
  arm(c, role, c->server->limits.request_timeout_ms);
}

/* At a peer watch's end: true when the peer took nothing since it was armed; else it is armed
 * again for the next request_timeout_ms. */
static bool peer_stalled(sb_http_conn *c, int role) {
  if (peer_taken(c) > c->taken_at_arm) {
    arm_peer_watch(c, role);
    return false;
  }
  return true;
}

/* ---- closing ----------------------------------------------------------------------------- */

void sb_http_conn_close(sb_http_conn *c) {
  if (c->phase == SB_CONN_CLOSED)
    return;
  c->phase = SB_CONN_CLOSED;
  if (c->tap != NULL) {
    const sb_http_tap *tap = c->tap;
    c->tap = NULL;
    tap->on_closed(c);
  }
  if (c->exchange != NULL)
    c->server->up->on_detach(c);
  free(c->pending);
  c->pending = NULL;
  c->pending_len = c->pending_off = 0;
  sb_http_request_free(&c->req);
  body_release(c);
  /* A handle the engine's shutdown walk already closed gets no callback from us; the server's
   * finalizer frees such connections once the loop is gone. */
  if (!uv_is_closing((uv_handle_t *)&c->timer)) {
    uv_timer_stop(&c->timer);
    uv_close((uv_handle_t *)&c->timer, handle_closed);
  }
  if (!uv_is_closing((uv_handle_t *)&c->tcp))
    uv_close((uv_handle_t *)&c->tcp, handle_closed);
}

static void shutdown_done(uv_shutdown_t *req, int status) {
  sb_http_conn *c = req->handle->data;
  free(req);
  if (status == UV_ECANCELED || c->phase != SB_CONN_CLOSING)
    return;
  if (status < 0) {
    sb_http_conn_close(c);
    return;
  }
  arm(c, TIMER_LINGER, LINGER_MS); /* the answer is flushed; wait for the peer's EOF */
}

/* Ends the connection gracefully after what is queued: FIN once flushed, then linger. */
static void conn_end(sb_http_conn *c) {
  if (c->phase == SB_CONN_CLOSED || c->phase == SB_CONN_CLOSING)
    return;
  c->phase = SB_CONN_CLOSING;
  free(c->pending);
  c->pending = NULL;
  c->pending_len = c->pending_off = 0;
  body_release(c);
  if (c->reading_paused) { /* read again: lingering drains input and waits for EOF */
    c->reading_paused = false;
    start_reading(c);
    if (c->phase == SB_CONN_CLOSED)
      return;
  }
  uv_shutdown_t *req = malloc(sizeof *req);
  if (req == NULL || uv_shutdown(req, (uv_stream_t *)&c->tcp, shutdown_done) != 0) {
    free(req);
    sb_http_conn_close(c);
    return;
  }
  /* A peer that does not read our last bytes is not waited for longer than a request. */
  arm_peer_watch(c, TIMER_FLUSH);
}

void sb_http_conn_end(sb_http_conn *c) {
  c->tap = NULL;
  conn_end(c);
}

void sb_http_conn_answer(sb_http_conn *c, int status, const char *text) {
  if (c->phase == SB_CONN_CLOSED || c->phase == SB_CONN_CLOSING)
    return;
  char answer[512];
  size_t n = sb_http_engine_answer(answer, sizeof answer, status, text);
  uv_buf_t buf = uv_buf_init(answer, (unsigned)n);
  if (sb_http_conn_write(c, &buf, 1))
    conn_end(c);
}

/* ---- writing ----------------------------------------------------------------------------- */

static void write_done(uv_write_t *req, int status) {
  sb_http_conn *c = req->handle->data;
  free(req);
  c->writes_pending--;
  if (status < 0 && status != UV_ECANCELED && c->phase != SB_CONN_CLOSED) {
    if (c->phase != SB_CONN_CLOSING)
      log_conn("debug", "http.peer_gone", c, "error", uv_err_name(status));
    sb_http_conn_close(c);
    return;
  }
  if (c->exchange != NULL && sb_http_conn_queued(c) <= SB_HTTP_DRAIN_MARK)
    c->server->up->on_drained(c);
  else if (c->tap != NULL && c->phase != SB_CONN_CLOSED && sb_http_conn_queued(c) <= SB_HTTP_DRAIN_MARK)
    c->tap->on_drained(c);
}

size_t sb_http_conn_queued(const sb_http_conn *c) {
  if (c->phase == SB_CONN_CLOSED)
    return 0;
  return uv_stream_get_write_queue_size((const uv_stream_t *)&c->tcp);
}

bool sb_http_conn_write(sb_http_conn *c, const uv_buf_t *bufs, unsigned nbufs) {
  if (c->phase == SB_CONN_CLOSED)
    return false;
  uv_stream_t *stream = (uv_stream_t *)&c->tcp;
  size_t total = 0;
  for (unsigned i = 0; i < nbufs; i++)
    total += bufs[i].len;
  if (total == 0)
    return true;
  size_t done = 0;
  if (c->writes_pending == 0) { /* nothing queued: try the socket at once, without a copy */
    int n = uv_try_write(stream, bufs, nbufs);
    if (n < 0 && n != UV_EAGAIN) {
      log_conn("debug", "http.peer_gone", c, "error", uv_err_name(n));
      sb_http_conn_close(c);
      return false;
    }
    done = n > 0 ? (size_t)n : 0;
    if (done == total)
      return true;
  }
  write_req *w = malloc(sizeof *w + (total - done));
  if (w == NULL) {
    sb_http_conn_close(c);
    return false;
  }
  size_t at = 0, skip = done;
  for (unsigned i = 0; i < nbufs; i++) {
    size_t len = bufs[i].len;
    if (skip >= len) {
      skip -= len;
      continue;
    }
    memcpy(w->data + at, bufs[i].base + skip, len - skip);
    at += len - skip;
    skip = 0;
  }
  uv_buf_t rest = uv_buf_init(w->data, (unsigned)at);
  int err = uv_write(&w->req, stream, &rest, 1, write_done);
  if (err != 0) {
    free(w);
    log_conn("debug", "http.peer_gone", c, "error", uv_err_name(err));
    sb_http_conn_close(c);
    return false;
  }
  c->writes_pending++;
  if (uv_stream_get_write_queue_size(stream) > c->server->limits.max_write_queue_bytes) {
    log_conn("warn", "http.slow_peer", c, "reason", "write queue over max_write_queue_bytes");
    sb_http_conn_close(c);
    return false;
  }
  return true;
}

/* ---- reading ----------------------------------------------------------------------------- */

static void alloc_read(uv_handle_t *h, size_t suggested, uv_buf_t *buf) {
  (void)h;
  (void)suggested;
  *buf = uv_buf_init(read_buffer, sizeof read_buffer);
}

/* The unparsed bytes held for later, in arrival order. */
static size_t pending_size(const sb_http_conn *c) { return c->pending_len - c->pending_off; }

/* Keeps bytes that must wait: a pipelined next request while one is with its handler, or
 * anything read while older bytes still wait to be parsed. Past one head's worth the
 * connection stops reading until the held bytes are parsed. */
static void conn_stash(sb_http_conn *c, const char *data, size_t len) {
  if (c->pending_off > 0) { /* drop what was parsed; never runs while next_request parses */
    memmove(c->pending, c->pending + c->pending_off, pending_size(c));
    c->pending_len -= c->pending_off;
    c->pending_off = 0;
  }
  char *grown = realloc(c->pending, c->pending_len + len);
  if (grown == NULL) {
    sb_http_conn_close(c);
    return;
  }
  memcpy(grown + c->pending_len, data, len);
  c->pending = grown;
  c->pending_len += len;
  if (pending_size(c) > c->server->limits.max_header_bytes && !c->reading_paused) {
    uv_read_stop((uv_stream_t *)&c->tcp);
    c->reading_paused = true;
  }
}

/* Bytes must wait when a request is with its handler, or when older bytes wait already (the
 * next request's turn has not come yet): the parser takes bytes strictly in arrival order. */
static bool must_stash(const sb_http_conn *c) {
  return c->phase == SB_CONN_HANDLING || c->timer_role == TIMER_NEXT || pending_size(c) > 0;
}

static void on_read(uv_stream_t *stream, ssize_t nread, const uv_buf_t *buf) {
  sb_http_conn *c = stream->data;
  if (nread == 0 || c->phase == SB_CONN_CLOSED)
    return;
  if (c->tap != NULL) { /* relayed: the bytes are the relay's, not the parser's */
    if (nread < 0)
      c->tap->on_eof(c);
    else
      c->tap->on_bytes(c, buf->base, (size_t)nread);
    return;
  }
  if (nread < 0) {
    /* EOF or reset. A half-closing client is treated as gone: HTTP clients keep their write
     * side open while they wait for an answer, and a peer that died sends a FIN too. */
    if (c->phase == SB_CONN_HANDLING)
      log_conn("debug", "http.peer_gone", c, "error", uv_err_name((int)nread));
    sb_http_conn_close(c);
    return;
  }
  if (c->phase == SB_CONN_CLOSING)
    return; /* lingering: input is dropped */
  if (must_stash(c)) {
    conn_stash(c, buf->base, (size_t)nread);
    return;
  }
  size_t used = conn_consume(c, buf->base, (size_t)nread);
  if (used < (size_t)nread && (c->phase == SB_CONN_HANDLING || c->phase == SB_CONN_READING))
    conn_stash(c, buf->base + used, (size_t)nread - used);
}

static void start_reading(sb_http_conn *c) {
  if (uv_read_start((uv_stream_t *)&c->tcp, alloc_read, on_read) != 0)
    sb_http_conn_close(c);
}

void sb_http_conn_read_pause(sb_http_conn *c, bool paused) {
  if (c->phase != SB_CONN_HANDLING || paused == c->reading_paused)
    return;
  c->reading_paused = paused;
  if (paused)
    uv_read_stop((uv_stream_t *)&c->tcp);
  else
    start_reading(c);
}

char *sb_http_conn_take_pending(sb_http_conn *c, size_t *len) {
  char *bytes = NULL;
  *len = pending_size(c);
  if (*len > 0 && (bytes = malloc(*len)) != NULL)
    memcpy(bytes, c->pending + c->pending_off, *len);
  if (bytes == NULL)
    *len = 0;
  free(c->pending);
  c->pending = NULL;
  c->pending_len = c->pending_off = 0;
  return bytes;
}

/* Readies the connection for its next request (same parser, fresh buffers). */
static void request_reset(sb_http_conn *c) {
  sb_http_request_next(&c->req);
  body_release(c);
  c->request_begun = false;
  c->continue_sent = false;
  c->head_checked = false;
}

/* A refused request's answer was written by the hook. */
static void after_refusal(sb_http_conn *c) {
  if (c->phase != SB_CONN_READING)
    return; /* the hook closed the connection (it failed, or the peer is gone) */
  /* A body nobody read cannot be skipped safely: the connection ends after the answer. */
  if (c->req.has_body || !c->keep_alive || c->server->closing) {
    conn_end(c);
    return;
  }
  request_reset(c);
  disarm(c);
  arm(c, TIMER_IDLE, c->server->limits.idle_timeout_ms);
}

/* The head is complete and a body follows: the hook, then the body pool, then 100-continue. */
static void head_done(sb_http_conn *c) {
  c->keep_alive = c->req.keep_alive && !c->server->closing;
  if (!c->server->up->on_head(c)) {
    after_refusal(c);
    return;
  }
  c->head_checked = true;
  c->proven = true;
  if (!body_reserve(c)) {
    log_conn("warn", "http.rejected", c, "status", "503");
    sb_http_conn_answer(c, 503, "service unavailable: too many request bodies in flight; "
                                "send the request again shortly");
    return;
  }
  if (c->req.expect_continue && !c->continue_sent) {
    static const char cont[] = "HTTP/1.1 100 Continue\r\n\r\n";
    uv_buf_t b = uv_buf_init((char *)cont, sizeof cont - 1);
    c->continue_sent = true;
    if (!sb_http_conn_write(c, &b, 1))
      return;
  }
  sb_http_request_accept_body(&c->req);
  if (c->req.state == SB_HTTP_REQ_ERROR) {
    sb_http_conn_answer(c, c->req.error_status, c->req.error_text);
  }
}

/* A complete request: the hook (unless it already saw the head), then the handler. Returns
 * true when the handler was started. */
static bool request_done(sb_http_conn *c) {
  disarm(c);
  if (!c->head_checked) {
    c->keep_alive = c->req.keep_alive && !c->server->closing;
    if (!c->server->up->on_head(c)) {
      after_refusal(c);
      return false;
    }
  }
  c->proven = true;
  c->phase = SB_CONN_HANDLING;
  bool ok = c->server->up->on_request(c);
  request_reset(c); /* the Lua face copied what it needs; the body leaves the pool */
  if (!ok)
    sb_http_conn_answer(c, 500, "internal server error");
  return true;
}

/* Parses received bytes while a request is being read; returns how many were used. It stops
 * when a request went to its handler (the rest waits for the response) or the connection
 * began to end (the rest is dropped). */
static size_t conn_consume(sb_http_conn *c, const char *data, size_t len) {
  size_t used = 0;
  while (used < len && c->phase == SB_CONN_READING) {
    if (!c->request_begun) {
      c->request_begun = true;
      arm(c, TIMER_REQUEST, c->server->limits.request_timeout_ms);
    }
    size_t n = sb_http_request_feed(&c->req, data + used, len - used);
    used += n;
    switch (c->req.state) {
    case SB_HTTP_REQ_ERROR: {
      char status[8];
      snprintf(status, sizeof status, "%d", c->req.error_status);
      log_conn("info", "http.rejected", c, "status", status);
      sb_http_conn_answer(c, c->req.error_status, c->req.error_text);
      return len;
    }
    case SB_HTTP_REQ_HEAD_DONE:
      head_done(c);
      break;
    case SB_HTTP_REQ_DONE:
      if (request_done(c)) /* one request per turn: the rest waits for next_request */
        return c->phase == SB_CONN_READING || c->phase == SB_CONN_HANDLING ? used : len;
      break;
    default:
      break;
    }
  }
  return c->phase == SB_CONN_READING || c->phase == SB_CONN_HANDLING ? used : len;
}

/* Starts the next request on a kept-alive connection, from a timer callback: never on the
 * C stack of the Lua code that finished the response. The bytes that waited are parsed
 * first; what arrives later is appended behind them. */
static void next_request(sb_http_conn *c) {
  c->request_begun = false;
  c->continue_sent = false;
  arm(c, TIMER_IDLE, c->server->limits.idle_timeout_ms);
  while (pending_size(c) > 0 && c->phase == SB_CONN_READING) {
    /* conn_consume may stash nothing here (must_stash is false only for fresh reads), and
     * the buffer stays put while it is parsed: only this function advances pending_off. */
    size_t used = conn_consume(c, c->pending + c->pending_off, pending_size(c));
    if (c->phase == SB_CONN_CLOSED || c->phase == SB_CONN_CLOSING)
      return; /* the held bytes went with the connection's end */
    c->pending_off += used;
    if (c->phase != SB_CONN_READING || c->timer_role == TIMER_NEXT)
      break; /* a handler runs (or ran): the rest waits for its turn */
  }
  if (pending_size(c) == 0) {
    free(c->pending);
    c->pending = NULL;
    c->pending_len = c->pending_off = 0;
  }
  if (c->reading_paused && pending_size(c) <= c->server->limits.max_header_bytes &&
      (c->phase == SB_CONN_READING || c->phase == SB_CONN_HANDLING)) {
    c->reading_paused = false;
    start_reading(c);
  }
}

void sb_http_conn_stall_watch(sb_http_conn *c, bool on) {
  if (c->phase != SB_CONN_HANDLING)
    return;
  if (on)
    arm_peer_watch(c, TIMER_STALL);
  else if (c->timer_role == TIMER_STALL)
    disarm(c);
}

void sb_http_conn_response_done(sb_http_conn *c) {
  if (c->phase != SB_CONN_HANDLING)
    return;
  if (!c->keep_alive || c->server->closing) {
    conn_end(c);
    return;
  }
  c->phase = SB_CONN_READING;
  if (pending_size(c) == 0 && !c->reading_paused) {
    /* nothing waits to be parsed: no handler runs from here, so the next request needs no turn
     * of its own (a timer set and fired per keep-alive request); its bytes start it when read */
    next_request(c);
    return;
  }
  arm(c, TIMER_NEXT, 0);
}

/* Whether bytes from the peer wait in the socket, unread. The loop runs due timers before it
 * polls the sockets: after this process was itself held up (a loaded host, a long stretch of
 * work on the loop), a request or idle timer fires before the loop has read what the peer sent
 * in time — a request that arrived would be dropped unanswered ("Empty reply from server"). */
static bool bytes_waiting(sb_http_conn *c) {
  uv_os_fd_t fd;
  int waiting = 0;
  if (uv_fileno((const uv_handle_t *)&c->tcp, &fd) != 0 || ioctl(fd, FIONREAD, &waiting) != 0)
    return false;
  return waiting > 0;
}

static void timer_fired(uv_timer_t *t) {
  sb_http_conn *c = t->data;
  int role = c->timer_role;
  c->timer_role = TIMER_NONE;
  if ((role == TIMER_REQUEST || role == TIMER_IDLE) && bytes_waiting(c)) {
    /* looked at again after this turn's poll has read them (1 ms: a 0 ms timer would run again
     * in this same timer phase, before the poll): a peer that sent nothing more is ended then */
    arm(c, role, 1);
    return;
  }
  switch (role) {
  case TIMER_NEXT:
    next_request(c);
    break;
  case TIMER_REQUEST:
    if (c->req.state == SB_HTTP_REQ_IDLE) { /* not a byte of a request: nobody to answer */
      sb_http_conn_close(c);
      break;
    }
    log_conn("info", "http.rejected", c, "status", "408");
    sb_http_conn_answer(c, 408, "request timeout: the request did not arrive in time");
    break;
  case TIMER_STALL:
    if (!peer_stalled(c, role))
      break;
    log_conn("warn", "http.slow_peer", c, "reason", "took no response bytes for request_timeout_ms");
    sb_http_conn_close(c);
    break;
  case TIMER_FLUSH:
    if (peer_stalled(c, role))
      sb_http_conn_close(c);
    break;
  case TIMER_IDLE:
  case TIMER_LINGER:
    sb_http_conn_close(c);
    break;
  default:
    break;
  }
}

/* ---- accepting --------------------------------------------------------------------------- */

/* A connection refused at the door: a short 503 if the socket takes it at once, then close
 * (no linger: refusals come in floods, and a lingering one would hold a descriptor). */
static void refuse_conn(sb_http_conn *c, const char *reason) {
  char answer[256];
  size_t n = sb_http_engine_answer(answer, sizeof answer, 503,
                                   "service unavailable: too many connections; retry shortly");
  uv_buf_t buf = uv_buf_init(answer, (unsigned)n);
  (void)uv_try_write((uv_stream_t *)&c->tcp, &buf, 1);
  sb_http_conn_close(c);
  tally(&c->server->rejected, "http.rejected", reason, NULL);
}

/* The oldest connection that never carried a request past the on_head hook (an idle or
 * trickling peer that proved nothing) and is waiting for input: the first to go when the
 * slots run out, so that idle floods cannot lock out peers with real work. */
static sb_http_conn *eviction_victim(sb_http_server *s, const sb_http_conn *except) {
  for (sb_http_conn *c = s->conns_tail; c != NULL; c = c->prev)
    if (c != except && !c->proven && c->phase == SB_CONN_READING && c->writes_pending == 0)
      return c;
  return NULL;
}

static void peer_name(sb_http_conn *c) {
  struct sockaddr_storage ss;
  int len = sizeof ss;
  strcpy(c->remote_addr, "?");
  if (uv_tcp_getpeername(&c->tcp, (struct sockaddr *)&ss, &len) != 0)
    return;
  if (ss.ss_family == AF_INET) {
    const struct sockaddr_in *a = (const struct sockaddr_in *)&ss;
    uv_ip4_name(a, c->remote_addr, sizeof c->remote_addr);
    c->remote_port = ntohs(a->sin_port);
  } else if (ss.ss_family == AF_INET6) {
    const struct sockaddr_in6 *a = (const struct sockaddr_in6 *)&ss;
    uv_ip6_name(a, c->remote_addr, sizeof c->remote_addr);
    c->remote_port = ntohs(a->sin6_port);
  }
}

static void on_connection(uv_stream_t *listener, int status);

static void resume_accept(uv_timer_t *t) {
  sb_http_server *s = t->data;
  s->accepts_this_turn = 0;
  s->turn_ms = uv_now(sb_loop());
  if (s->accept_paused && !s->closing) {
    s->accept_paused = false;
    on_connection((uv_stream_t *)&s->listener, 0); /* the one libuv kept for us */
  }
}

/* At most this many connections are accepted per loop turn. libuv accepts the whole backlog
 * in one go, and under a flood each accept may close the oldest idle connection: without a
 * pause, a well-behaved client accepted early in a batch would be closed by later ones before
 * its first bytes were ever read. Pausing lets the loop read between batches. */
static uint32_t accept_batch(const sb_http_server *s) {
  size_t k = s->limits.max_connections / 8;
  return k < 1 ? 1 : k > 256 ? 256 : (uint32_t)k;
}

static void on_connection(uv_stream_t *listener, int status) {
  sb_http_server *s = listener->data;
  if (status < 0) { /* EMFILE and friends: libuv already shed the pending connection */
    tally(&s->accept_failed, "http.accept_failed", "accept", uv_err_name(status));
    return;
  }
  if (s->closing)
    return;
  uint64_t now = uv_now(sb_loop());
  if (now != s->turn_ms) {
    s->turn_ms = now;
    s->accepts_this_turn = 0;
  }
  if (s->accepts_this_turn >= accept_batch(s)) {
    /* Not accepting now makes libuv keep this connection and stop polling the listener
     * until uv_accept is called again, on the next turn. */
    s->accept_paused = true;
    uv_timer_start(&s->accept_timer, resume_accept, 0, 0);
    return;
  }
  s->accepts_this_turn++;
  sb_http_conn *c = calloc(1, sizeof *c);
  if (c == NULL) {
    tally(&s->accept_failed, "http.accept_failed", "accept", "ENOMEM");
    return;
  }
  c->server = s;
  c->next = s->conns;
  if (s->conns != NULL)
    s->conns->prev = c;
  else
    s->conns_tail = c;
  s->conns = c;
  s->n_conns++;
  sb_http_request_limits rl = {s->limits.max_header_bytes, s->limits.max_body_bytes};
  sb_http_request_init(&c->req, &rl);
  uv_tcp_init(sb_loop(), &c->tcp);
  uv_timer_init(sb_loop(), &c->timer);
  c->tcp.data = c;
  c->timer.data = c;
  c->handles_open = 2;
  c->phase = SB_CONN_READING;
  int err = uv_accept(listener, (uv_stream_t *)&c->tcp);
  if (err != 0) {
    sb_http_conn_close(c);
    tally(&s->accept_failed, "http.accept_failed", "accept", uv_err_name(err));
    return;
  }
  peer_name(c);
  if (s->n_conns > s->limits.max_connections) {
    sb_http_conn *victim = eviction_victim(s, c);
    if (victim == NULL) {
      refuse_conn(c, "max_connections");
      return;
    }
    sb_http_conn_close(victim);
    tally(&s->evicted, "http.evicted", "idle unproven connection closed for a new one", NULL);
  }
  sb_http_peer *peer = peer_get(s, c->remote_addr);
  if (peer == NULL) {
    sb_http_conn_close(c);
    return;
  }
  peer->conns++;
  c->peer = peer;
  if (peer->conns > s->limits.max_connections_per_peer) {
    refuse_conn(c, "max_connections_per_peer");
    return;
  }
  uv_tcp_nodelay(&c->tcp, 1); /* small writes (heartbeats, short answers) go out at once */
  /* A new connection has one request timeout to deliver its first request. */
  arm(c, TIMER_REQUEST, s->limits.request_timeout_ms);
  start_reading(c);
}

/* ---- the server -------------------------------------------------------------------------- */

static void listener_closed(uv_handle_t *h) {
  sb_http_server *s = h->data;
  if (--s->handles_open > 0)
    return;
  s->listener_closed = true;
  server_maybe_closed(s);
}

static void close_listener(sb_http_server *s) {
  if (!uv_is_closing((uv_handle_t *)&s->listener))
    uv_close((uv_handle_t *)&s->listener, listener_closed);
  if (!uv_is_closing((uv_handle_t *)&s->accept_timer))
    uv_close((uv_handle_t *)&s->accept_timer, listener_closed);
}

int sb_http_server_listen(sb_http_server *s, const char *host, int port) {
  struct sockaddr_storage addr;
  int err = strchr(host, ':') != NULL ? uv_ip6_addr(host, port, (struct sockaddr_in6 *)&addr)
                                      : uv_ip4_addr(host, port, (struct sockaddr_in *)&addr);
  uv_tcp_init(sb_loop(), &s->listener);
  s->listener.data = s;
  uv_timer_init(sb_loop(), &s->accept_timer);
  s->accept_timer.data = s;
  uv_unref((uv_handle_t *)&s->accept_timer); /* only the listener keeps the loop alive */
  s->handles_open = 2;
  if (err == 0)
    err = uv_tcp_bind(&s->listener, (const struct sockaddr *)&addr, 0);
  if (err == 0)
    err = uv_listen((uv_stream_t *)&s->listener, BACKLOG, on_connection);
  if (err == 0) {
    struct sockaddr_storage bound;
    int len = sizeof bound;
    uv_tcp_getsockname(&s->listener, (struct sockaddr *)&bound, &len);
    s->port = ntohs(bound.ss_family == AF_INET6 ? ((struct sockaddr_in6 *)&bound)->sin6_port
                                                : ((struct sockaddr_in *)&bound)->sin_port);
    return 0;
  }
  s->closing = true;
  s->orphaned = true;
  close_listener(s);
  return err;
}

void sb_http_server_stop(sb_http_server *s, bool hard) {
  s->closing = true;
  close_listener(s);
  for (sb_http_conn *c = s->conns; c != NULL; c = c->next) {
    /* closing does not unlink (the close callback does), so the walk stays valid */
    if (hard || (c->phase == SB_CONN_READING && !c->request_begun))
      sb_http_conn_close(c);
    else
      c->keep_alive = false;
  }
}

void sb_http_server_free_all(sb_http_server *s) {
  while (s->conns != NULL) {
    sb_http_conn *c = s->conns;
    s->conns = c->next;
    if (c->exchange != NULL)
      c->server->up->on_detach(c);
    sb_http_request_free(&c->req);
    free(c->pending);
    free(c);
  }
  peers_free(s);
  free(s);
}
