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
  size_t max_bodies_bytes;      /* request bodies of all connections together, bytes: a body is
                                 * admitted (its declared length, or max_body_bytes when chunked)
                                 * only while the total stays under this; past it 503 */
  size_t max_connections_per_peer; /* open at once from one remote address; past it 503 */
} sb_http_limits;

/* Open connections per remote address (a small chained hash table). */
typedef struct sb_http_peer sb_http_peer;
struct sb_http_peer {
  sb_http_peer *next;
  uint32_t conns;
  char addr[46]; /* INET6_ADDRSTRLEN */
};
enum { SB_HTTP_PEER_BUCKETS = 256 };

/* A count of like events logged at most once a second (floods happen by definition). */
typedef struct {
  uint64_t count;
  uint64_t logged_at; /* loop time (ms) of the last line; 0: never */
} sb_http_tally;

typedef struct sb_http_conn sb_http_conn;
typedef struct sb_http_server sb_http_server;
typedef struct sb_http_callbacks sb_http_callbacks;

/* A connection handed over to a byte relay (relay.c, res:relay): from then on its input goes to
 * on_bytes / on_eof instead of the HTTP parser, on_drained is called as its queued output falls
 * under SB_HTTP_DRAIN_MARK, and on_closed when it closes (the tap is cleared first). */
typedef struct {
  void (*on_bytes)(sb_http_conn *c, const char *data, size_t len);
  void (*on_eof)(sb_http_conn *c);
  void (*on_drained)(sb_http_conn *c);
  void (*on_closed)(sb_http_conn *c);
} sb_http_tap;

struct sb_http_server {
  uv_tcp_t listener;
  uv_timer_t accept_timer; /* resumes accepting on the next loop turn after a paused batch */
  uint8_t handles_open;    /* listener and accept_timer: 2 → 0 as they close */
  bool accept_paused;      /* a connection waits in the listener (libuv holds it) */
  uint32_t accepts_this_turn; /* connections accepted since turn_ms */
  uint64_t turn_ms;
  sb_http_limits limits;
  const sb_http_callbacks *up; /* the layer above (set before listening) */
  sb_http_conn *conns; /* open connections (including those closing), newest first */
  sb_http_conn *conns_tail; /* the oldest */
  size_t n_conns;
  size_t bodies_reserved; /* bytes of max_bodies_bytes held by requests reading a body */
  sb_http_peer *peers[SB_HTTP_PEER_BUCKETS];
  int port;             /* the bound port */
  sb_http_tally rejected;      /* connections refused (max_connections, per-peer cap) */
  sb_http_tally evicted;       /* idle unproven connections closed to make room */
  sb_http_tally accept_failed; /* accept(2) errors (EMFILE …) */
  bool closing;         /* no more accepting; connections end after their current response */
  bool listener_closed; /* the listener's and the accept timer's close callbacks ran */
  bool orphaned;        /* the Lua object is gone: the last close callback frees this */
  int self_ref;         /* registry: the Lua server object, while anything is open */
  int handler_ref;      /* registry: the handler function */
  int on_head_ref;      /* registry: the on_head hook, or LUA_NOREF */
  /* registry: the table the on_head hook let on, kept for the same request's handler
   * (server.c "the request, built once"), or LUA_NOREF; head_req_conn is its connection */
  int head_req_ref;
  const sb_http_conn *head_req_conn;
  /* core.http.serve's log_hide: path prefixes (NUL-terminated) after which a log line shows
   * "<hidden>" instead of the client's bytes — a run page's token is its only credential */
  char log_hide[4][33];
  size_t n_log_hide;
  struct sb_exec_lane *lane; /* the /exec lane's state (src/lane/exec_lane.c), or NULL */
  const struct sb_http_lane_hooks *lane_hooks; /* its hooks (lane_face.h), or NULL */
};

typedef enum { SB_CONN_READING, SB_CONN_HANDLING, SB_CONN_CLOSING, SB_CONN_CLOSED } sb_conn_phase;

struct sb_http_conn {
  uv_tcp_t tcp;
  uv_timer_t timer; /* one timer, its role depends on the phase (see server_conn.c) */
  sb_http_server *server;
  sb_http_conn *prev, *next;
  sb_http_request req;
  char *pending; /* owned: received bytes not parsed yet (a pipelined next request); they are
                  * parsed before any byte read later, in arrival order */
  size_t pending_len, pending_off; /* the unparsed bytes are pending[pending_off, pending_len) */
  size_t body_reserved;  /* bytes of the server's max_bodies_bytes this request holds */
  sb_http_peer *peer;    /* this connection's entry in the per-peer counts, NULL before */
  void *exchange; /* the Lua face's response object while HANDLING, else NULL */
  uint32_t writes_pending; /* uv_write requests not completed */
  uint64_t taken_at_arm;   /* the peer's acknowledged bytes when a STALL or FLUSH timer began */
  uint8_t phase;           /* sb_conn_phase */
  uint8_t timer_role;
  uint8_t handles_open;    /* 2 → 0 as tcp and timer close */
  bool request_begun;      /* a byte of the current request arrived */
  bool keep_alive;         /* the connection may carry another request after this one */
  bool continue_sent;
  bool reading_paused;     /* read stopped: too much pipelined input while HANDLING */
  bool head_checked;       /* the current request's head passed the on_head hook */
  bool proven;             /* a request on it passed on_head (an authenticated peer, for
                            * sandboxd); unproven idle connections are the first closed when
                            * the slots run out */
  char remote_addr[46];    /* INET6_ADDRSTRLEN */
  uint16_t remote_port;
  const sb_http_tap *tap;  /* set while the connection is relayed (relay.c), else NULL */
  void *lane_entry;        /* the exec lane's claim on the current request, made at its head */
  void *tap_ud;
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
/* Bytes queued for the peer and not yet taken by the socket. */
size_t sb_http_conn_queued(const sb_http_conn *c);
/* While a response waits for the peer to take its queued bytes (res:drain): `on` arms a timer;
 * a peer that took none of our bytes for request_timeout_ms counts as gone and the connection
 * closes (one that took some, however few, is watched for another request_timeout_ms). */
void sb_http_conn_stall_watch(sb_http_conn *c, bool on);
/* res:drain() waits while more than this is queued. */
enum { SB_HTTP_DRAIN_MARK = 256 * 1024 };

/* The response's last byte was queued: take the next request, or close when the connection
 * may not be kept alive. */
void sb_http_conn_response_done(sb_http_conn *c);
/* Answers an engine error (text/plain `text`) and closes once it is flushed. */
void sb_http_conn_answer(sb_http_conn *c, int status, const char *text);
/* Closes at once, dropping anything queued. */
void sb_http_conn_close(sb_http_conn *c);
/* Ends gracefully: FIN once what is queued is flushed, then a short linger (a relay's end). */
void sb_http_conn_end(sb_http_conn *c);
/* Stops or resumes reading (a relay whose other side is not taking bytes). */
void sb_http_conn_read_pause(sb_http_conn *c, bool paused);
/* The bytes received and not parsed yet (a pipelined request, or a relay's first bytes);
 * handed over to the caller, which frees them. */
char *sb_http_conn_take_pending(sb_http_conn *c, size_t *len);

/* What the layer above (the Lua face, server.c) does at each step, as llhttp takes its
 * callbacks: the transport calls up only through this table, never by a function's name. */
struct sb_http_callbacks {
  /* The head of c->req is complete (state HEAD_DONE, or DONE for a request without a body):
   * the server's on_head hook looks at it before any body byte is read. Returns true to go
   * on; false when the hook answered (or failed and 500 was answered) — the answer is written
   * and the connection is ending or, for a bodyless request, ready for the next one
   * (c->keep_alive). */
  bool (*on_head)(sb_http_conn *c);
  /* The response's queued bytes fell under the drain mark: a task waiting in res:drain() goes
   * on. Called only while c->exchange is set. */
  void (*on_drained)(sb_http_conn *c);
  /* A complete request is in c->req: start its handler task and set c->exchange. Returns
   * false when that failed (the connection answers 500). */
  bool (*on_request)(sb_http_conn *c);
  /* The connection closes while c->exchange is set: the response is detached and marked
   * closed; c->exchange is NULL afterwards. */
  void (*on_detach)(sb_http_conn *c);
  /* The listener is closed and no connection remains (the callee may free s). */
  void (*on_server_closed)(sb_http_server *s);
};

#endif
