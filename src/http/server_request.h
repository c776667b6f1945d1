/* One HTTP/1.x request at a time, parsed from the bytes a connection receives, under limits.
 *
 * Pure C over llhttp (no libuv, no Lua), so the unit tests and the fuzz target drive exactly
 * the code the server runs. The parser accumulates the request target, the header lines and
 * the body; it stops after one complete request (the caller handles it, then calls
 * sb_http_request_next() before feeding the bytes of the next one) or at the first error,
 * which carries the HTTP status the server answers with (400, 413, 431). */
#ifndef SB_HTTP_SERVER_REQUEST_H
#define SB_HTTP_SERVER_REQUEST_H

#include <llhttp.h>
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

typedef struct {
  size_t max_header_bytes; /* request line + header lines (and trailers), bytes; past it: 431 */
  size_t max_body_bytes;   /* decoded body, bytes; past it (or a larger content-length): 413 */
} sb_http_request_limits;

typedef enum {
  SB_HTTP_REQ_IDLE,  /* no byte of a request yet */
  SB_HTTP_REQ_HEAD,  /* inside the request line or the header lines */
  SB_HTTP_REQ_HEAD_DONE, /* the head is complete and a body follows: parsing stops before its
                          * first byte until the caller accepts it (sb_http_request_accept_body),
                          * so a request can be refused without reading or buffering its body */
  SB_HTTP_REQ_BODY,  /* headers complete, body arriving */
  SB_HTTP_REQ_DONE,  /* one complete request is available */
  SB_HTTP_REQ_ERROR, /* malformed or over a limit: answer `error_status`, then close */
} sb_http_request_state;

/* Offsets into `head`; names are lower-cased, values have surrounding blanks trimmed. */
typedef struct {
  uint32_t name_off, name_len, value_off, value_len;
} sb_http_header;

typedef struct {
  llhttp_t parser;
  sb_http_request_limits limits;
  sb_http_request_state state;

  char *head; /* owned: the target, then header names and values; NULL while idle */
  size_t head_len, head_cap;
  size_t target_len;   /* the request target is head[0, target_len) */
  size_t head_counted; /* bytes the callbacks charged against max_header_bytes */
  size_t head_raw;     /* every byte consumed before the head was complete, same limit */
  sb_http_header *headers; /* owned */
  size_t n_headers, headers_cap;
  bool in_field;     /* the last header callback was part of a name */
  bool headers_done; /* header lines after this are chunked trailers: counted, not kept */
  bool saw_version;  /* the request line carried an HTTP version */

  char *body; /* owned, NULL when empty */
  size_t body_len, body_cap;

  bool expect_continue; /* `expect: 100-continue` on a request that has a body */
  bool has_body;        /* valid from HEAD_DONE: a content-length > 0 or a chunked body */
  bool keep_alive;      /* valid from HEAD_DONE: the connection may carry another request */
  bool upgrade;         /* valid in DONE: CONNECT or Upgrade; the connection must close after */

  int error_status;       /* valid in ERROR: 400, 413, 417, 431, 501 or 505 */
  const char *error_text; /* valid in ERROR: a short static explanation for the client */
} sb_http_request;

void sb_http_request_init(sb_http_request *r, const sb_http_request_limits *limits);

/* Feeds received bytes and returns how many were consumed. Parsing stops after a complete
 * request (state DONE: the unconsumed rest belongs to the next request), at the end of a head
 * that a body follows (state HEAD_DONE: nothing more is consumed until
 * sb_http_request_accept_body) or at an error (state ERROR: the rest is garbage). Returns 0
 * in DONE, HEAD_DONE and ERROR. */
size_t sb_http_request_feed(sb_http_request *r, const char *data, size_t len);

/* In HEAD_DONE: the body may be read; parsing resumes with the next feed (state BODY). */
void sb_http_request_accept_body(sb_http_request *r);

/* In HEAD_DONE: the most body bytes this request can make the parser hold — its declared
 * content-length, or max_body_bytes for a chunked body. */
size_t sb_http_request_body_bound(const sb_http_request *r);

/* After DONE: releases the request's buffers and readies the parser for the next request on
 * the same connection (state IDLE). */
void sb_http_request_next(sb_http_request *r);

/* Releases every buffer; the struct may be discarded or initialized again. */
void sb_http_request_free(sb_http_request *r);

/* Accessors, valid in HEAD_DONE, BODY and DONE. */
const char *sb_http_request_method(const sb_http_request *r);
int sb_http_request_version_minor(const sb_http_request *r); /* HTTP/1.x → x */
bool sb_http_request_is_head(const sb_http_request *r);

/* The bytes of header `i`'s name and value. */
static inline const char *sb_http_header_name(const sb_http_request *r, size_t i) {
  return r->head + r->headers[i].name_off;
}
static inline const char *sb_http_header_value(const sb_http_request *r, size_t i) {
  return r->head + r->headers[i].value_off;
}

/* Splits a request target into path (no query, no fragment) and raw query (without '?').
 * Absolute-form targets ("http://host/p?q") yield their path ("/" when empty). */
void sb_http_split_target(const char *target, size_t len, const char **path, size_t *path_len,
                          const char **query, size_t *query_len);

#endif
