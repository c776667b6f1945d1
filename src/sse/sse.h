/* An incremental parser for server-sent events (the WHATWG "text/event-stream" format), with
 * no Lua, libuv or libcurl in it so that the unit tests and the fuzz target drive the exact
 * code the engine runs on a model's streamed answer.
 *
 * Bytes are fed as they arrive, split anywhere (inside a CRLF, a UTF-8 sequence, a field
 * name). Lines end with CRLF, LF or CR; a leading UTF-8 BOM is dropped; `:` lines are
 * comments; `event` sets the type, `data` lines are joined with LF; `id` and `retry` are read
 * and ignored (a client that re-sends whole requests has no use for them); other fields are
 * ignored. An empty line dispatches the event when it has data (the type defaults to
 * "message"). An event still open when the stream ends is never dispatched: the caller knows
 * the stream was cut from the missing terminal event, not from the parser.
 *
 * Memory: one event's bytes (its pending line, type and data) are held at most; past
 * max_event_bytes the parser refuses further input (SB_SSE_TOO_LARGE) so that a peer cannot
 * make it grow without bound. */
#ifndef SB_SSE_H
#define SB_SSE_H

#include <stdbool.h>
#include <stddef.h>

enum {
  SB_SSE_OK = 0,
  SB_SSE_TOO_LARGE = -1, /* an event (or a line) grew past max_event_bytes */
  SB_SSE_NOMEM = -2,
};

/* Called once per dispatched event. `type` and `data` are not NUL-terminated and are valid
 * only during the call. A nonzero return stops the feed, which returns that value. */
typedef int (*sb_sse_event_fn)(void *ud, const char *type, size_t type_len, const char *data,
                               size_t data_len);

typedef struct {
  char *data; /* owned */
  size_t len, cap;
} sb_sse_buf;

typedef struct {
  size_t max_event_bytes; /* bytes: the bound on line + type + data held at once */
  sb_sse_buf line;        /* a line not yet ended by the bytes fed so far */
  sb_sse_buf type;        /* the current event's type ("" = default) */
  sb_sse_buf data;        /* the current event's data lines, each followed by LF */
  bool has_data;          /* a data field was seen since the last dispatch */
  bool skip_lf;           /* the previous byte was a CR: an LF right after it is its pair */
  bool bom_checked;       /* the first bytes were looked at for a BOM */
  int failed;             /* a sticky SB_SSE_TOO_LARGE / SB_SSE_NOMEM */
  size_t events;          /* events dispatched so far */
} sb_sse;

void sb_sse_init(sb_sse *p, size_t max_event_bytes);
void sb_sse_free(sb_sse *p); /* frees the buffers; the struct is the caller's */

/* Parses bytes[0..n). Returns SB_SSE_OK, a negative SB_SSE_* (sticky: every later feed returns
 * it too), or the first nonzero value `fn` returned (the bytes after that event are dropped). */
int sb_sse_feed(sb_sse *p, const char *bytes, size_t n, sb_sse_event_fn fn, void *ud);

/* Bytes held for an unfinished line or event (0 between events). */
size_t sb_sse_buffered(const sb_sse *p);

#endif
