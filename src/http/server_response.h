/* The bytes of an HTTP/1.1 response that the server frames itself: status lines, chunk
 * framing, header validation and the short text answers the engine gives on its own (400,
 * 408, 413, 431, 500, 503). Pure C, no I/O. */
#ifndef SB_HTTP_SERVER_RESPONSE_H
#define SB_HTTP_SERVER_RESPONSE_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

/* The reason phrase for `status` ("OK", "Not Found", …; "Unknown" for unlisted codes). */
const char *sb_http_reason(int status);

/* A header name must be a non-empty RFC 9110 token. */
bool sb_http_name_valid(const char *s, size_t n);
/* A header value must not contain CR, LF or NUL (no header injection). */
bool sb_http_value_valid(const char *s, size_t n);
/* Case-insensitive comparison with a lower-case literal. */
bool sb_http_name_is(const char *s, size_t n, const char *lower);

enum { SB_HTTP_STATUS_LINE_MAX = 64, SB_HTTP_CHUNK_PREFIX_MAX = 20, SB_HTTP_DATE_LINE_MAX = 48 };
/* Writes "date: <IMF-fixdate>\r\n" for the current second (RFC 9110 6.6.1: an origin server
 * with a clock sends Date), independent of the C locale; returns its length. */
size_t sb_http_date_line(char out[SB_HTTP_DATE_LINE_MAX]);
/* Writes "HTTP/1.1 <status> <reason>\r\n" into `out`; returns its length. */
size_t sb_http_status_line(char out[SB_HTTP_STATUS_LINE_MAX], int status);
/* Writes the chunk-size line "<hex>\r\n" for an `n`-byte chunk; returns its length. */
size_t sb_http_chunk_prefix(char out[SB_HTTP_CHUNK_PREFIX_MAX], size_t n);

/* A complete engine answer with a date, a text/plain body "`text`\n", content-length and
 * `connection: close`. Returns the length written, at most `cap` (texts are short and
 * static; the answer is cut, never overrun, when `cap` is too small). */
size_t sb_http_engine_answer(char *out, size_t cap, int status, const char *text);

/* ---- response framing: how a handler's response is delimited on the wire ----------------- */

typedef enum {
  SB_HTTP_FRAME_NONE,    /* no body at all: HEAD, 204, 304 */
  SB_HTTP_FRAME_LENGTH,  /* content-length: exactly `remaining` more bytes */
  SB_HTTP_FRAME_CHUNKED, /* transfer-encoding: chunked */
  SB_HTTP_FRAME_CLOSE,   /* HTTP/1.0 without a length: the close ends the body */
} sb_http_framing;

typedef struct {
  /* in */
  int status;
  bool head_request;  /* HEAD: the head is sent, the body never */
  bool http10;        /* the request was HTTP/1.0 */
  bool keep_alive;    /* the connection may carry another request (out: it still may) */
  bool handler_close; /* the handler sent `connection: close` */
  bool has_length;    /* a length is known: `length` bytes */
  bool length_is_body; /* that length is the body the server was handed (res:send), not a
                        * content-length header from the handler */
  uint64_t length;
  /* out */
  sb_http_framing framing;
  uint64_t remaining; /* FRAME_LENGTH: body bytes still owed */
} sb_http_frame;

enum { SB_HTTP_FRAME_LINES_MAX = 160, SB_HTTP_FRAME_END_MAX = 8 };

/* Decides the framing of a response (f's inputs) and writes the lines the server owns — the
 * content-length or transfer-encoding line, the connection line — and the blank line that ends
 * the head. Returns their length. */
size_t sb_http_frame_head(sb_http_frame *f, char out[SB_HTTP_FRAME_LINES_MAX]);

typedef enum {
  SB_HTTP_BODY_SEND, /* send prefix, the bytes, suffix */
  SB_HTTP_BODY_SKIP, /* nothing goes on the wire (a bodyless response, an empty chunk) */
  SB_HTTP_BODY_OVER, /* more bytes than the declared length: refuse */
} sb_http_body_verdict;

typedef struct {
  char prefix[SB_HTTP_CHUNK_PREFIX_MAX];
  size_t prefix_len;
  const char *suffix; /* static */
  size_t suffix_len;
  uint64_t over; /* SB_HTTP_BODY_OVER: by how many bytes */
} sb_http_body_piece;

/* Frames `n` body bytes. */
sb_http_body_verdict sb_http_frame_body(sb_http_frame *f, size_t n, sb_http_body_piece *out);

/* Ends the body: writes the terminator (the last chunk) and returns its length; *short_body is
 * set when fewer bytes than declared were sent (the peer must see a close), and keep_alive is
 * cleared whenever only a close can end the body. */
size_t sb_http_frame_end(sb_http_frame *f, char out[SB_HTTP_FRAME_END_MAX], bool *short_body);

#endif
