/* The bytes of an HTTP/1.1 response that the server frames itself: status lines, chunk
 * framing, header validation and the short text answers the engine gives on its own (400,
 * 408, 413, 431, 500, 503). Pure C, no I/O. */
#ifndef SB_HTTP_SERVER_RESPONSE_H
#define SB_HTTP_SERVER_RESPONSE_H

#include <stdbool.h>
#include <stddef.h>

/* The reason phrase for `status` ("OK", "Not Found", …; "Unknown" for unlisted codes). */
const char *sb_http_reason(int status);

/* A header name must be a non-empty RFC 9110 token. */
bool sb_http_name_valid(const char *s, size_t n);
/* A header value must not contain CR, LF or NUL (no header injection). */
bool sb_http_value_valid(const char *s, size_t n);
/* Case-insensitive comparison with a lower-case literal. */
bool sb_http_name_is(const char *s, size_t n, const char *lower);

enum { SB_HTTP_STATUS_LINE_MAX = 64, SB_HTTP_CHUNK_PREFIX_MAX = 20 };
/* Writes "HTTP/1.1 <status> <reason>\r\n" into `out`; returns its length. */
size_t sb_http_status_line(char out[SB_HTTP_STATUS_LINE_MAX], int status);
/* Writes the chunk-size line "<hex>\r\n" for an `n`-byte chunk; returns its length. */
size_t sb_http_chunk_prefix(char out[SB_HTTP_CHUNK_PREFIX_MAX], size_t n);

/* A complete engine answer with a text/plain body "`text`\n", content-length and
 * `connection: close`. Returns the length written, at most `cap` (texts are short and
 * static; the answer is cut, never overrun, when `cap` is too small). */
size_t sb_http_engine_answer(char *out, size_t cap, int status, const char *text);

#endif
