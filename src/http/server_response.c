/* Response framing helpers (see server_response.h). */
#include "server_response.h"

#include <stdio.h>
#include <string.h>

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

size_t sb_http_status_line(char out[SB_HTTP_STATUS_LINE_MAX], int status) {
  int n = snprintf(out, SB_HTTP_STATUS_LINE_MAX, "HTTP/1.1 %03d %s\r\n", status,
                   sb_http_reason(status));
  return n < 0 ? 0 : (size_t)n < SB_HTTP_STATUS_LINE_MAX ? (size_t)n : SB_HTTP_STATUS_LINE_MAX - 1;
}

size_t sb_http_chunk_prefix(char out[SB_HTTP_CHUNK_PREFIX_MAX], size_t n) {
  int len = snprintf(out, SB_HTTP_CHUNK_PREFIX_MAX, "%zx\r\n", n);
  return len < 0 ? 0 : (size_t)len;
}

size_t sb_http_engine_answer(char *out, size_t cap, int status, const char *text) {
  int n = snprintf(out, cap,
                   "HTTP/1.1 %03d %s\r\ncontent-type: text/plain; charset=utf-8\r\n"
                   "content-length: %zu\r\nconnection: close\r\n\r\n%s\n",
                   status, sb_http_reason(status), strlen(text) + 1, text);
  if (n < 0)
    return 0;
  return (size_t)n < cap ? (size_t)n : cap > 0 ? cap - 1 : 0;
}
