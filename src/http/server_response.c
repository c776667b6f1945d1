/* Response framing helpers (see server_response.h). */
#include "server_response.h"

#include <stdio.h>
#include <string.h>
#include <time.h>

const char *sb_http_reason(int status) {
  switch (status) {
  case 100: return "Continue";
  case 200: return "OK";
  case 201: return "Created";
  case 202: return "Accepted";
  case 204: return "No Content";
  case 206: return "Partial Content";
  case 301: return "Moved Permanently";
  case 302: return "Found";
  case 303: return "See Other";
  case 304: return "Not Modified";
  case 307: return "Temporary Redirect";
  case 308: return "Permanent Redirect";
  case 400: return "Bad Request";
  case 401: return "Unauthorized";
  case 403: return "Forbidden";
  case 404: return "Not Found";
  case 405: return "Method Not Allowed";
  case 408: return "Request Timeout";
  case 409: return "Conflict";
  case 410: return "Gone";
  case 411: return "Length Required";
  case 413: return "Content Too Large";
  case 414: return "URI Too Long";
  case 415: return "Unsupported Media Type";
  case 422: return "Unprocessable Content";
  case 429: return "Too Many Requests";
  case 431: return "Request Header Fields Too Large";
  case 500: return "Internal Server Error";
  case 501: return "Not Implemented";
  case 502: return "Bad Gateway";
  case 503: return "Service Unavailable";
  case 504: return "Gateway Timeout";
  default: return "Unknown";
  }
}

bool sb_http_name_valid(const char *s, size_t n) {
  if (n == 0)
    return false;
  for (size_t i = 0; i < n; i++) {
    unsigned char c = (unsigned char)s[i];
    bool ok = (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || (c >= '0' && c <= '9') ||
              (c != '\0' && strchr("!#$%&'*+-.^_`|~", c) != NULL);
    if (!ok)
      return false;
  }
  return true;
}

bool sb_http_value_valid(const char *s, size_t n) {
  for (size_t i = 0; i < n; i++)
    if (s[i] == '\r' || s[i] == '\n' || s[i] == '\0')
      return false;
  return true;
}

bool sb_http_name_is(const char *s, size_t n, const char *lower) {
  size_t m = strlen(lower);
  if (n != m)
    return false;
  for (size_t i = 0; i < n; i++) {
    char c = s[i];
    if (c >= 'A' && c <= 'Z')
      c = (char)(c - 'A' + 'a');
    if (c != lower[i])
      return false;
  }
  return true;
}

size_t sb_http_date_line(char out[SB_HTTP_DATE_LINE_MAX]) {
  static const char days[7][4] = {"Sun", "Mon", "Tue", "Wed", "Thu", "Fri", "Sat"};
  static const char months[12][4] = {"Jan", "Feb", "Mar", "Apr", "May", "Jun",
                                     "Jul", "Aug", "Sep", "Oct", "Nov", "Dec"};
  static time_t cached_at = (time_t)-1; /* formatted once per second */
  static char cached[SB_HTTP_DATE_LINE_MAX];
  static size_t cached_len;
  time_t now = time(NULL);
  if (now != cached_at) {
    struct tm tm;
    gmtime_r(&now, &tm);
    int n = snprintf(cached, sizeof cached, "date: %s, %02d %s %04d %02d:%02d:%02d GMT\r\n",
                     days[tm.tm_wday % 7], tm.tm_mday, months[tm.tm_mon % 12], tm.tm_year + 1900,
                     tm.tm_hour, tm.tm_min, tm.tm_sec);
    cached_len = n > 0 && (size_t)n < sizeof cached ? (size_t)n : 0;
    cached_at = now;
  }
  memcpy(out, cached, cached_len);
  return cached_len;
}

/* The lines below are written by hand, not with snprintf: every answer has a status line and
 * a length or chunk line, and printf's machinery (its format parse, its stream set-up) was ~2 %
 * of sandboxd's CPU per walled request (issue 43). tests/c/test_http_request.c and
 * fuzz_http_request check them against the snprintf formats they replaced. */

/* The decimal digits of v into out (at most 20); returns their count. */
static size_t decimal(char *out, uint64_t v) {
  char digits[20];
  size_t n = 0;
  do {
    digits[n++] = (char)('0' + v % 10);
    v /= 10;
  } while (v != 0);
  for (size_t i = 0; i < n; i++)
    out[i] = digits[n - 1 - i];
  return n;
}

size_t sb_http_status_line(char out[SB_HTTP_STATUS_LINE_MAX], int status) {
  const char *reason = sb_http_reason(status);
  size_t reason_len = strlen(reason); /* the longest: "Request Header Fields Too Large", 31 */
  if (status < 0 || status > 999) { /* not a status any caller sends: printf's form, kept */
    int n = snprintf(out, SB_HTTP_STATUS_LINE_MAX, "HTTP/1.1 %03d %s\r\n", status, reason);
    return n < 0 ? 0 : (size_t)n < SB_HTTP_STATUS_LINE_MAX ? (size_t)n : SB_HTTP_STATUS_LINE_MAX - 1;
  }
  memcpy(out, "HTTP/1.1 ", 9);
  out[9] = (char)('0' + status / 100);
  out[10] = (char)('0' + status / 10 % 10);
  out[11] = (char)('0' + status % 10);
  out[12] = ' ';
  memcpy(out + 13, reason, reason_len);
  memcpy(out + 13 + reason_len, "\r\n", 3); /* with the NUL, as snprintf left it */
  return 13 + reason_len + 2;
}

size_t sb_http_chunk_prefix(char out[SB_HTTP_CHUNK_PREFIX_MAX], size_t n) {
  static const char hex[] = "0123456789abcdef";
  char digits[2 * sizeof n];
  size_t k = 0;
  do {
    digits[k++] = hex[n & 15];
    n >>= 4;
  } while (n != 0);
  for (size_t i = 0; i < k; i++)
    out[i] = digits[k - 1 - i];
  memcpy(out + k, "\r\n", 3);
  return k + 2;
}

size_t sb_http_engine_answer(char *out, size_t cap, int status, const char *text) {
  char date[SB_HTTP_DATE_LINE_MAX];
  size_t date_len = sb_http_date_line(date);
  int n = snprintf(out, cap,
                   "HTTP/1.1 %03d %s\r\n%.*scontent-type: text/plain; charset=utf-8\r\n"
                   "content-length: %zu\r\nconnection: close\r\n\r\n%s\n",
                   status, sb_http_reason(status), (int)date_len, date, strlen(text) + 1, text);
  if (n < 0)
    return 0;
  return (size_t)n < cap ? (size_t)n : cap > 0 ? cap - 1 : 0;
}

/* ---- framing ----------------------------------------------------------------------------- */

size_t sb_http_frame_head(sb_http_frame *f, char out[SB_HTTP_FRAME_LINES_MAX]) {
  size_t at = 0;
  bool keep_alive = f->keep_alive && !f->handler_close;
  bool bodyless = f->head_request || f->status == 204 || f->status == 304 ||
                  (f->status >= 100 && f->status < 200);
  f->remaining = 0;
  if (f->has_length) {
    f->framing = bodyless ? SB_HTTP_FRAME_NONE : SB_HTTP_FRAME_LENGTH;
    f->remaining = bodyless ? 0 : f->length;
    /* 204 never carries content-length (RFC 9110 8.6); a 304's would describe the cached
     * representation, which only the handler knows. */
    if (f->status != 204 && (f->status != 304 || !f->length_is_body)) {
      memcpy(out, "content-length: ", 16);
      at = 16 + decimal(out + 16, f->length);
      memcpy(out + at, "\r\n", 2);
      at += 2;
    }
  } else if (bodyless) {
    f->framing = SB_HTTP_FRAME_NONE;
  } else if (f->http10) {
    f->framing = SB_HTTP_FRAME_CLOSE; /* HTTP/1.0 has no chunked coding */
    keep_alive = false;
  } else {
    f->framing = SB_HTTP_FRAME_CHUNKED;
    memcpy(out + at, "transfer-encoding: chunked\r\n", 28);
    at += 28;
  }
  if (!keep_alive) {
    memcpy(out + at, "connection: close\r\n", 19);
    at += 19;
  } else if (f->http10) {
    memcpy(out + at, "connection: keep-alive\r\n", 24);
    at += 24;
  }
  memcpy(out + at, "\r\n", 2);
  at += 2;
  f->keep_alive = keep_alive;
  return at;
}

sb_http_body_verdict sb_http_frame_body(sb_http_frame *f, size_t n, sb_http_body_piece *out) {
  out->prefix_len = 0;
  out->suffix = "";
  out->suffix_len = 0;
  out->over = 0;
  switch (f->framing) {
  case SB_HTTP_FRAME_NONE:
    return SB_HTTP_BODY_SKIP;
  case SB_HTTP_FRAME_LENGTH:
    if (n > f->remaining) {
      out->over = n - f->remaining;
      return SB_HTTP_BODY_OVER;
    }
    f->remaining -= n;
    return n == 0 ? SB_HTTP_BODY_SKIP : SB_HTTP_BODY_SEND;
  case SB_HTTP_FRAME_CHUNKED:
    if (n == 0)
      return SB_HTTP_BODY_SKIP; /* an empty chunk would end the body */
    out->prefix_len = sb_http_chunk_prefix(out->prefix, n);
    out->suffix = "\r\n";
    out->suffix_len = 2;
    return SB_HTTP_BODY_SEND;
  default:
    return n == 0 ? SB_HTTP_BODY_SKIP : SB_HTTP_BODY_SEND;
  }
}

size_t sb_http_frame_end(sb_http_frame *f, char out[SB_HTTP_FRAME_END_MAX], bool *short_body) {
  *short_body = false;
  if (f->framing == SB_HTTP_FRAME_CHUNKED) {
    memcpy(out, "0\r\n\r\n", 5);
    return 5;
  }
  if (f->framing == SB_HTTP_FRAME_LENGTH && f->remaining > 0) {
    *short_body = true;
    f->keep_alive = false; /* the peer sees a truncated body, then the close */
  } else if (f->framing == SB_HTTP_FRAME_CLOSE) {
    f->keep_alive = false;
  }
  return 0;
}
