/* The HTTP server's connections (see server_conn.h for the phases). */
#include "server_conn.h"
#include "server_response.h"
#include "../engine/engine.h"
#include "../log/log.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

enum {
  BACKLOG = 511,
  READ_BUFFER_BYTES = 64 * 1024,
  LINGER_MS = 2000, /* after our FIN: how long input is drained so the peer reads our answer */
};

/* What the connection's single timer means when it fires. */
enum { TIMER_NONE, TIMER_REQUEST, TIMER_IDLE, TIMER_NEXT, TIMER_FLUSH, TIMER_LINGER };

/* Every read lands here and is parsed (or copied) before the next read is allocated, so one
 * buffer serves every connection and an idle connection holds none. */
static char read_buffer[READ_BUFFER_BYTES];

typedef struct {
  uv_write_t req;
  char data[];
} write_req;

static void conn_consume(sb_http_conn *c, const char *data, size_t len);
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

/* ---- server bookkeeping ------------------------------------------------------------------ */

static void server_maybe_closed(sb_http_server *s) {
  if (s->listener_closed && s->conns == NULL)
    sb_http_on_server_closed(s); /* may free s */
}

static void conn_free(sb_http_conn *c) {
  sb_http_server *s = c->server;
  if (c->prev != NULL)
    c->prev->next = c->next;
  else
    s->conns = c->next;
  if (c->next != NULL)
    c->next->prev = c->prev;
  s->n_conns--;
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
  uv_timer_start(&c->timer, timer_fired, ms, 0);
}

static void disarm(sb_http_conn *c) {
  c->timer_role = TIMER_NONE;
  uv_timer_stop(&c->timer);
}

/* ---- closing ----------------------------------------------------------------------------- */

void sb_http_conn_close(sb_http_conn *c) {
  if (c->phase == SB_CONN_CLOSED)
    return;
  c->phase = SB_CONN_CLOSED;
  if (c->exchange != NULL)
    sb_http_on_detach(c);
  free(c->pending);
  c->pending = NULL;
  c->pending_len = 0;
  sb_http_request_free(&c->req);
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
  c->pending_len = 0;
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
  arm(c, TIMER_FLUSH, c->server->limits.request_timeout_ms);
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
  }
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

/* Keeps bytes that arrived while a request is with its handler (a pipelined next request).
 * Past one head's worth the connection stops reading until the response is done. */
static void conn_stash(sb_http_conn *c, const char *data, size_t len) {
  char *grown = realloc(c->pending, c->pending_len + len);
  if (grown == NULL) {
    sb_http_conn_close(c);
    return;
  }
  memcpy(grown + c->pending_len, data, len);
  c->pending = grown;
  c->pending_len += len;
  if (c->phase == SB_CONN_HANDLING && c->pending_len > c->server->limits.max_header_bytes &&
      !c->reading_paused) {
    uv_read_stop((uv_stream_t *)&c->tcp);
    c->reading_paused = true;
  }
}

static void on_read(uv_stream_t *stream, ssize_t nread, const uv_buf_t *buf) {
  sb_http_conn *c = stream->data;
  if (nread == 0 || c->phase == SB_CONN_CLOSED)
    return;
  if (nread < 0) {
    /* EOF or reset. A half-closing client is treated as gone: HTTP clients keep their write
     * side open while they wait for an answer, and a peer that died sends a FIN too. */
    if (c->phase == SB_CONN_HANDLING)
      log_conn("debug", "http.peer_gone", c, "error", uv_err_name((int)nread));
    sb_http_conn_close(c);
    return;
  }
  switch (c->phase) {
  case SB_CONN_READING:
    conn_consume(c, buf->base, (size_t)nread);
    break;
  case SB_CONN_HANDLING:
    conn_stash(c, buf->base, (size_t)nread);
    break;
  default: /* CLOSING: lingering, input is dropped */
    break;
  }
}

static void start_reading(sb_http_conn *c) {
  if (uv_read_start((uv_stream_t *)&c->tcp, alloc_read, on_read) != 0)
    sb_http_conn_close(c);
}

/* Parses received bytes while a request is being read. */
static void conn_consume(sb_http_conn *c, const char *data, size_t len) {
  while (len > 0 && c->phase == SB_CONN_READING) {
    if (!c->request_begun) {
      c->request_begun = true;
      arm(c, TIMER_REQUEST, c->server->limits.request_timeout_ms);
    }
    size_t n = sb_http_request_feed(&c->req, data, len);
    data += n;
    len -= n;
    switch (c->req.state) {
    case SB_HTTP_REQ_ERROR: {
      char status[8];
      snprintf(status, sizeof status, "%d", c->req.error_status);
      log_conn("info", "http.rejected", c, "status", status);
      sb_http_conn_answer(c, c->req.error_status, c->req.error_text);
      return;
    }
    case SB_HTTP_REQ_BODY:
      if (c->req.expect_continue && !c->continue_sent) {
        static const char cont[] = "HTTP/1.1 100 Continue\r\n\r\n";
        uv_buf_t b = uv_buf_init((char *)cont, sizeof cont - 1);
        c->continue_sent = true;
        if (!sb_http_conn_write(c, &b, 1))
          return;
      }
      break;
    case SB_HTTP_REQ_DONE: {
      disarm(c);
      c->phase = SB_CONN_HANDLING;
      c->keep_alive = c->req.keep_alive && !c->server->closing;
      bool ok = sb_http_on_request(c);
      sb_http_request_next(&c->req); /* the Lua face copied what it needs */
      if (!ok) {
        sb_http_conn_answer(c, 500, "internal server error");
        return;
      }
      if (len > 0)
        conn_stash(c, data, len);
      return;
    }
    default:
      break;
    }
  }
}

/* Starts the next request on a kept-alive connection, from a timer callback: never on the
 * C stack of the Lua code that finished the response. */
static void next_request(sb_http_conn *c) {
  char *buf = c->pending;
  size_t len = c->pending_len;
  c->pending = NULL;
  c->pending_len = 0;
  c->request_begun = false;
  c->continue_sent = false;
  arm(c, TIMER_IDLE, c->server->limits.idle_timeout_ms);
  if (c->reading_paused) {
    c->reading_paused = false;
    start_reading(c);
  }
  if (len > 0 && c->phase == SB_CONN_READING)
    conn_consume(c, buf, len);
  free(buf);
}

void sb_http_conn_response_done(sb_http_conn *c) {
  if (c->phase != SB_CONN_HANDLING)
    return;
  if (!c->keep_alive || c->server->closing) {
    conn_end(c);
    return;
  }
  c->phase = SB_CONN_READING;
  arm(c, TIMER_NEXT, 0);
}

static void timer_fired(uv_timer_t *t) {
  sb_http_conn *c = t->data;
  int role = c->timer_role;
  c->timer_role = TIMER_NONE;
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
  case TIMER_IDLE:
  case TIMER_FLUSH:
  case TIMER_LINGER:
    sb_http_conn_close(c);
    break;
  default:
    break;
  }
}

/* ---- accepting --------------------------------------------------------------------------- */

static void free_handle(uv_handle_t *h) { free(h); }

/* Over max_connections: a short 503 if the socket takes it at once, then close. */
static void reject(sb_http_server *s) {
  uv_tcp_t *tcp = malloc(sizeof *tcp);
  if (tcp == NULL)
    return;
  uv_tcp_init(sb_loop(), tcp);
  if (uv_accept((uv_stream_t *)&s->listener, (uv_stream_t *)tcp) == 0) {
    char answer[256];
    size_t n = sb_http_engine_answer(answer, sizeof answer, 503,
                                     "service unavailable: too many connections");
    uv_buf_t buf = uv_buf_init(answer, (unsigned)n);
    (void)uv_try_write((uv_stream_t *)tcp, &buf, 1);
  }
  uv_close((uv_handle_t *)tcp, free_handle);
  sb_log_field f[] = {{"reason", "max_connections", false}};
  sb_log_write("warn", "http.rejected", f, 1);
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

static void on_connection(uv_stream_t *listener, int status) {
  sb_http_server *s = listener->data;
  if (status < 0) {
    sb_log_field f[] = {{"error", uv_err_name(status), false}};
    sb_log_write("warn", "http.accept_failed", f, 1);
    return;
  }
  if (s->closing)
    return;
  if (s->n_conns >= s->limits.max_connections) {
    reject(s);
    return;
  }
  sb_http_conn *c = calloc(1, sizeof *c);
  if (c == NULL) {
    reject(s);
    return;
  }
  c->server = s;
  c->next = s->conns;
  if (s->conns != NULL)
    s->conns->prev = c;
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
  if (uv_accept(listener, (uv_stream_t *)&c->tcp) != 0) {
    sb_http_conn_close(c);
    return;
  }
  uv_tcp_nodelay(&c->tcp, 1); /* small writes (heartbeats, short answers) go out at once */
  peer_name(c);
  /* A new connection has one request timeout to deliver its first request. */
  arm(c, TIMER_REQUEST, s->limits.request_timeout_ms);
  start_reading(c);
}

/* ---- the server -------------------------------------------------------------------------- */

static void listener_closed(uv_handle_t *h) {
  sb_http_server *s = h->data;
  s->listener_closed = true;
  server_maybe_closed(s);
}

int sb_http_server_listen(sb_http_server *s, const char *host, int port) {
  struct sockaddr_storage addr;
  int err = strchr(host, ':') != NULL ? uv_ip6_addr(host, port, (struct sockaddr_in6 *)&addr)
                                      : uv_ip4_addr(host, port, (struct sockaddr_in *)&addr);
  uv_tcp_init(sb_loop(), &s->listener);
  s->listener.data = s;
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
  uv_close((uv_handle_t *)&s->listener, listener_closed);
  return err;
}

void sb_http_server_stop(sb_http_server *s, bool hard) {
  s->closing = true;
  if (!uv_is_closing((uv_handle_t *)&s->listener))
    uv_close((uv_handle_t *)&s->listener, listener_closed);
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
      sb_http_on_detach(c);
    sb_http_request_free(&c->req);
    free(c->pending);
    free(c);
  }
  free(s);
}
