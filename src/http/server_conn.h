/* The HTTP server's connections on libuv: accepting, reading and parsing one request at a
 * time, the limits and timers, writing, and closing cleanly. The Lua face (server.c) sits on
 * top: it turns a complete request into a handler task and frames the handler's response.
 *
 * A connection is in one phase at a time:
 *   READING   parsing a request (idle timer before its first byte, request timer after);
 *   HANDLING  the request is with the handler; no timer (a handler may take as long as it
 *             likes); reading goes on so a peer that leaves is noticed at once, and bytes of
 *             a pipelined next request are kept until this response is done;
 *   CLOSING   the last response is queued: the write side is shut down once it is flushed,
 *             and input is read and dropped for a short linger so the peer sees our answer
 *             instead of a reset;
 *   CLOSED    the handles are closing; memory goes with the last close callback.
 *
 * Memory: a connection holds its handles and parser (about 0.7 KiB). Request buffers exist
 * only while a request is being read; every read lands in one shared buffer. */
#ifndef SB_HTTP_SERVER_CONN_H
#define SB_HTTP_SERVER_CONN_H

#include "server_request.h"

#include <stdbool.h>
#include <stdint.h>
#include <uv.h>

typedef struct {
  size_t max_header_bytes;      /* 431 past it */
  size_t max_body_bytes;        /* 413 past it */
  uint64_t request_timeout_ms;  /* first byte of a request → its last byte; 408 past it */
  uint64_t idle_timeout_ms;     /* keep-alive connection with no request in progress */
  size_t max_connections;       /* open at once; beyond it a connection gets 503 and is closed */
  size_t max_write_queue_bytes; /* response bytes queued for a peer that does not read */
} sb_http_limits;

typedef struct sb_http_conn sb_http_conn;
typedef struct sb_http_server sb_http_server;

struct sb_http_server {
  uv_tcp_t listener;
  sb_http_limits limits;
  sb_http_conn *conns; /* open connections (including those closing), doubly linked */
  size_t n_conns;
  int port;             /* the bound port */
  bool closing;         /* no more accepting; connections end after their current response */
  bool listener_closed; /* the listener's close callback ran */
  bool orphaned;        /* the Lua object is gone: the last close callback frees this */
  int self_ref;         /* registry: the Lua server object, while anything is open */
  int handler_ref;      /* registry: the handler function */
};

typedef enum { SB_CONN_READING, SB_CONN_HANDLING, SB_CONN_CLOSING, SB_CONN_CLOSED } sb_conn_phase;

struct sb_http_conn {
  uv_tcp_t tcp;
  uv_timer_t timer; /* one timer, its role depends on the phase (see server_conn.c) */
  sb_http_server *server;
  sb_http_conn *prev, *next;
  sb_http_request req;
  char *pending; /* owned: received bytes not parsed yet (a pipelined next request) */
  size_t pending_len;
  void *exchange; /* the Lua face's response object while HANDLING, else NULL */
  uint32_t writes_pending; /* uv_write requests not completed */
  uint8_t phase;           /* sb_conn_phase */
  uint8_t timer_role;
  uint8_t handles_open;    /* 2 → 0 as tcp and timer close */
  bool request_begun;      /* a byte of the current request arrived */
  bool keep_alive;         /* the connection may carry another request after this one */
  bool continue_sent;
  bool reading_paused;     /* read stopped: too much pipelined input while HANDLING */
  char remote_addr[46];    /* INET6_ADDRSTRLEN */
  uint16_t remote_port;
};

/* Binds and listens; on failure returns a libuv error, and `s` is freed once its listener
 * handle closed (the caller must not touch it again). */
int sb_http_server_listen(sb_http_server *s, const char *host, int port);
/* Stops accepting. `hard`: closes every connection now; else idle connections close now and
 * the others after their current request's response. */
void sb_http_server_stop(sb_http_server *s, bool hard);
/* After the loop was closed by the engine's shutdown (which closed every handle): frees the
 * connections and the server. */
void sb_http_server_free_all(sb_http_server *s);

/* Sends bytes (copied when they cannot be written at once). Returns false when the connection
 * is gone (or went now: the peer reset, or it let more than max_write_queue_bytes pile up). */
bool sb_http_conn_write(sb_http_conn *c, const uv_buf_t *bufs, unsigned nbufs);
/* The response's last byte was queued: take the next request, or close when the connection
 * may not be kept alive. */
void sb_http_conn_response_done(sb_http_conn *c);
/* Answers an engine error (text/plain `text`) and closes once it is flushed. */
void sb_http_conn_answer(sb_http_conn *c, int status, const char *text);
/* Closes at once, dropping anything queued. */
void sb_http_conn_close(sb_http_conn *c);

/* Implemented by the Lua face. */
/* A complete request is in c->req: start its handler task and set c->exchange. Returns false
 * when that failed (the connection answers 500). */
bool sb_http_on_request(sb_http_conn *c);
/* The connection closes while c->exchange is set: the response is detached and marked
 * closed; c->exchange is NULL afterwards. */
void sb_http_on_detach(sb_http_conn *c);
/* The listener is closed and no connection remains. */
void sb_http_on_server_closed(sb_http_server *s);

#endif
