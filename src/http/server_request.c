/* The request parser (see server_request.h). llhttp calls back with pieces of the target,
 * header names and values and the body as they arrive; we copy them into per-request buffers
 * that exist only while a request is being read, and charge every byte against the limits
 * before storing it, so an oversized request never costs more than its limit in memory. */
#include "server_request.h"

#include <stdlib.h>
#include <string.h>

/* Charged per header line on top of its name and value (": " and CRLF), and once for the
 * request line around the target (method, spaces, version, CRLF), so that max_header_bytes
 * approximates the bytes on the wire. */
enum { LINE_OVERHEAD = 4, REQUEST_LINE_OVERHEAD = 16 };

static sb_http_request *of(llhttp_t *p) { return p->data; }

static int fail(sb_http_request *r, int status, const char *text) {
  r->state = SB_HTTP_REQ_ERROR;
  r->error_status = status;
  r->error_text = text;
  return HPE_USER;
}

/* Charges `n` head bytes; false (and state ERROR) past the limit. */
static bool charge_head(sb_http_request *r, size_t n) {
  r->head_counted += n;
  if (r->head_counted > r->limits.max_header_bytes) {
    fail(r, 431, "request header fields too large");
    return false;
  }
  return true;
}

/* Grows `*buf` to hold `need` bytes, doubling from `first`; false when out of memory. */
static bool reserve(char **buf, size_t *cap, size_t need, size_t first) {
  if (need <= *cap)
    return true;
  size_t cap2 = *cap ? *cap : first;
  while (cap2 < need)
    cap2 *= 2;
  char *grown = realloc(*buf, cap2);
  if (grown == NULL)
    return false;
  *buf = grown;
  *cap = cap2;
  return true;
}

static bool head_append(sb_http_request *r, const char *at, size_t n, bool lower) {
  if (!reserve(&r->head, &r->head_cap, r->head_len + n, 512)) {
    fail(r, 431, "request header fields too large");
    return false;
  }
  char *dst = r->head + r->head_len;
  if (lower) {
    for (size_t i = 0; i < n; i++) {
      char c = at[i];
      dst[i] = (c >= 'A' && c <= 'Z') ? (char)(c - 'A' + 'a') : c;
    }
  } else {
    memcpy(dst, at, n);
  }
  r->head_len += n;
  return true;
}

static int on_message_begin(llhttp_t *p) {
  sb_http_request *r = of(p);
  r->state = SB_HTTP_REQ_HEAD;
  return charge_head(r, REQUEST_LINE_OVERHEAD) ? 0 : HPE_USER;
}

static int on_url(llhttp_t *p, const char *at, size_t n) {
  sb_http_request *r = of(p);
  if (!charge_head(r, n) || !head_append(r, at, n, false))
    return HPE_USER;
  r->target_len += n;
  return 0;
}

static int on_header_field(llhttp_t *p, const char *at, size_t n) {
  sb_http_request *r = of(p);
  if (!charge_head(r, n + (r->in_field ? 0 : LINE_OVERHEAD)))
    return HPE_USER;
  if (r->headers_done) { /* a trailer: counted, not kept */
    r->in_field = true;
    return 0;
  }
  if (!r->in_field) {
    if (r->n_headers == r->headers_cap) {
      size_t cap = r->headers_cap ? r->headers_cap * 2 : 16;
      sb_http_header *grown = realloc(r->headers, cap * sizeof *grown);
      if (grown == NULL)
        return fail(r, 431, "request header fields too large");
      r->headers = grown;
      r->headers_cap = cap;
    }
    r->headers[r->n_headers] = (sb_http_header){(uint32_t)r->head_len, 0, 0, 0};
    r->in_field = true;
  }
  if (!head_append(r, at, n, true))
    return HPE_USER;
  r->headers[r->n_headers].name_len += (uint32_t)n;
  return 0;
}

/* RFC 9110 tchar. llhttp 8.1 lets a blank inside a name through ("Bad Header: x"); a name
 * that a proxy in front of us might read differently is refused here. */
static bool is_token(const char *s, size_t n) {
  static const char extra[] = "!#$%&'*+-.^_`|~";
  if (n == 0)
    return false;
  for (size_t i = 0; i < n; i++) {
    unsigned char c = (unsigned char)s[i];
    if (!((c >= 'a' && c <= 'z') || (c >= '0' && c <= '9') ||
          (c != '\0' && memchr(extra, c, sizeof extra - 1) != NULL)))
      return false; /* names are already lower-cased */
  }
  return true;
}

static int on_header_field_complete(llhttp_t *p) {
  sb_http_request *r = of(p);
  r->in_field = false;
  if (r->headers_done)
    return 0;
  sb_http_header *h = &r->headers[r->n_headers];
  if (!is_token(r->head + h->name_off, h->name_len))
    return fail(r, 400, "bad request: invalid header name");
  h->value_off = (uint32_t)r->head_len;
  return 0;
}

static int on_header_value(llhttp_t *p, const char *at, size_t n) {
  sb_http_request *r = of(p);
  if (!charge_head(r, n))
    return HPE_USER;
  if (r->headers_done)
    return 0;
  if (!head_append(r, at, n, false))
    return HPE_USER;
  r->headers[r->n_headers].value_len += (uint32_t)n;
  return 0;
}

static bool is_blank(char c) { return c == ' ' || c == '\t'; }

static int on_header_value_complete(llhttp_t *p) {
  sb_http_request *r = of(p);
  if (r->headers_done)
    return 0;
  sb_http_header *h = &r->headers[r->n_headers];
  while (h->value_len > 0 && is_blank(r->head[h->value_off + h->value_len - 1]))
    h->value_len--;
  while (h->value_len > 0 && is_blank(r->head[h->value_off])) {
    h->value_off++;
    h->value_len--;
  }
  r->n_headers++;
  return 0;
}

static bool equals_nocase(const char *a, size_t alen, const char *lower) {
  size_t n = strlen(lower);
  if (alen != n)
    return false;
  for (size_t i = 0; i < n; i++) {
    char c = a[i];
    if (c >= 'A' && c <= 'Z')
      c = (char)(c - 'A' + 'a');
    if (c != lower[i])
      return false;
  }
  return true;
}

/* The transfer-codings of every transfer-encoding line: only "chunked" is implemented. llhttp
 * frames "gzip, chunked" as chunked and would hand us the still-compressed bytes as the body. */
static bool only_chunked_coding(const sb_http_request *r) {
  for (size_t i = 0; i < r->n_headers; i++) {
    const sb_http_header *h = &r->headers[i];
    if (!equals_nocase(sb_http_header_name(r, i), h->name_len, "transfer-encoding"))
      continue;
    const char *v = sb_http_header_value(r, i), *end = v + h->value_len;
    while (v < end) {
      const char *comma = memchr(v, ',', (size_t)(end - v));
      const char *stop = comma != NULL ? comma : end;
      const char *a = v, *b = stop;
      while (a < b && is_blank(*a))
        a++;
      while (b > a && is_blank(b[-1]))
        b--;
      if (b > a && !equals_nocase(a, (size_t)(b - a), "chunked"))
        return false;
      v = comma != NULL ? comma + 1 : end;
    }
  }
  return true;
}

static int on_version(llhttp_t *p, const char *at, size_t n) {
  (void)at;
  (void)n;
  of(p)->saw_version = true;
  return 0;
}

static int on_headers_complete(llhttp_t *p) {
  sb_http_request *r = of(p);
  r->headers_done = true;
  /* Only HTTP/1.0 and 1.1 are served. A request line without a version (HTTP/0.9's form) has
   * no head to answer in; 0.9 or 2.0 spelt out get 505. */
  if (!r->saw_version)
    return fail(r, 400, "bad request: the request line has no HTTP version");
  if (p->http_major != 1 || p->http_minor > 1)
    return fail(r, 505, "HTTP version not supported: send HTTP/1.1");
  if (!only_chunked_coding(r))
    return fail(r, 501, "unsupported transfer-coding: send the body plain or chunked");
  /* A declared length over the limit is refused before a byte of it is read. */
  if ((p->flags & F_CONTENT_LENGTH) && p->content_length > r->limits.max_body_bytes)
    return fail(r, 413, "request body too large");
  r->has_body = (p->flags & F_CHUNKED) || p->content_length > 0;
  /* Known from the head alone; the server decides on it before a body is read (head_done),
   * so waiting for on_message_complete would close every connection that carried a body. */
  r->keep_alive = llhttp_should_keep_alive(p) && !p->upgrade && p->method != HTTP_CONNECT;
  for (size_t i = 0; i < r->n_headers; i++) {
    const sb_http_header *h = &r->headers[i];
    if (!equals_nocase(sb_http_header_name(r, i), h->name_len, "expect"))
      continue;
    if (!equals_nocase(sb_http_header_value(r, i), h->value_len, "100-continue"))
      return fail(r, 417, "expectation failed: only 100-continue is understood");
    r->expect_continue = r->has_body;
  }
  if (!r->has_body) {
    r->state = SB_HTTP_REQ_BODY; /* on_message_complete follows at once */
    return 0;
  }
  /* Stop before the body: the caller looks at the head first (sb_http_request_accept_body). */
  r->state = SB_HTTP_REQ_HEAD_DONE;
  return HPE_PAUSED;
}

void sb_http_request_accept_body(sb_http_request *r) {
  if (r->state != SB_HTTP_REQ_HEAD_DONE)
    return;
  r->state = SB_HTTP_REQ_BODY;
  llhttp_resume(&r->parser);
  /* Reserve the declared length (up to a first slice) instead of doubling up to it; a client
   * that declares a megabyte and sends nothing does not get a megabyte from us. */
  if (r->parser.flags & F_CONTENT_LENGTH) {
    size_t first = r->parser.content_length < 65536 ? (size_t)r->parser.content_length : 65536;
    if (!reserve(&r->body, &r->body_cap, first, 1))
      fail(r, 413, "request body too large");
  }
}

size_t sb_http_request_body_bound(const sb_http_request *r) {
  if (!r->has_body)
    return 0;
  if (r->parser.flags & F_CHUNKED)
    return r->limits.max_body_bytes;
  return (size_t)r->parser.content_length;
}

static int on_body(llhttp_t *p, const char *at, size_t n) {
  sb_http_request *r = of(p);
  if (n > r->limits.max_body_bytes - r->body_len)
    return fail(r, 413, "request body too large");
  if (!reserve(&r->body, &r->body_cap, r->body_len + n, 4096))
    return fail(r, 413, "request body too large");
  memcpy(r->body + r->body_len, at, n);
  r->body_len += n;
  return 0;
}

static int on_message_complete(llhttp_t *p) {
  sb_http_request *r = of(p);
  r->state = SB_HTTP_REQ_DONE;
  r->keep_alive = llhttp_should_keep_alive(p);
  r->upgrade = p->upgrade || p->method == HTTP_CONNECT;
  if (r->upgrade)
    r->keep_alive = false;
  return HPE_PAUSED; /* one request at a time: the caller resumes with _next() */
}

static const llhttp_settings_t settings = {
    .on_message_begin = on_message_begin,
    .on_url = on_url,
    .on_version = on_version,
    .on_header_field = on_header_field,
    .on_header_field_complete = on_header_field_complete,
    .on_header_value = on_header_value,
    .on_header_value_complete = on_header_value_complete,
    .on_headers_complete = on_headers_complete,
    .on_body = on_body,
    .on_message_complete = on_message_complete,
};

void sb_http_request_init(sb_http_request *r, const sb_http_request_limits *limits) {
  memset(r, 0, sizeof *r);
  r->limits = *limits;
  llhttp_init(&r->parser, HTTP_REQUEST, &settings);
  r->parser.data = r;
}

static void release(sb_http_request *r) {
  free(r->head);
  free(r->headers);
  free(r->body);
  r->head = NULL;
  r->headers = NULL;
  r->body = NULL;
  r->head_len = r->head_cap = r->target_len = r->head_counted = r->head_raw = 0;
  r->n_headers = r->headers_cap = 0;
  r->body_len = r->body_cap = 0;
  r->in_field = r->headers_done = false;
  r->expect_continue = r->keep_alive = r->upgrade = r->has_body = r->saw_version = false;
}

/* The text for a parse error: llhttp's own reason names the broken rule, never the bytes. */
static const char *parse_error_text(llhttp_errno_t err) {
  switch (err) {
  case HPE_INVALID_METHOD: return "bad request: invalid method";
  case HPE_INVALID_URL: return "bad request: invalid request target";
  case HPE_INVALID_VERSION: return "bad request: invalid HTTP version";
  case HPE_INVALID_HEADER_TOKEN: return "bad request: invalid header name";
  case HPE_INVALID_CONTENT_LENGTH: return "bad request: invalid content-length";
  case HPE_UNEXPECTED_CONTENT_LENGTH:
    return "bad request: content-length together with transfer-encoding";
  case HPE_INVALID_TRANSFER_ENCODING: return "bad request: invalid transfer-encoding";
  case HPE_INVALID_CHUNK_SIZE: return "bad request: invalid chunk size";
  case HPE_CR_EXPECTED:
  case HPE_LF_EXPECTED: return "bad request: malformed line ending";
  case HPE_PAUSED_H2_UPGRADE: return "bad request: HTTP/2 is not served here";
  default: return "bad request: malformed HTTP";
  }
}

size_t sb_http_request_feed(sb_http_request *r, const char *data, size_t len) {
  if (r->state == SB_HTTP_REQ_DONE || r->state == SB_HTTP_REQ_ERROR || len == 0)
    return 0;
  sb_http_request_state entry = r->state;
  if (entry == SB_HTTP_REQ_HEAD_DONE)
    return 0; /* waiting for sb_http_request_accept_body */
  llhttp_errno_t err = llhttp_execute(&r->parser, data, len);
  size_t consumed = len;
  if (err == HPE_PAUSED || (err == HPE_PAUSED_UPGRADE && r->state == SB_HTTP_REQ_DONE)) {
    consumed = (size_t)(llhttp_get_error_pos(&r->parser) - data);
  } else if (err != HPE_OK) {
    if (r->state != SB_HTTP_REQ_ERROR)
      fail(r, 400, parse_error_text(err)); /* else a callback failed and set the status */
    /* Head bytes past the limit come first, whichever error follows them in the same read:
     * the outcome must not depend on how reads split the stream. */
    const char *pos = llhttp_get_error_pos(&r->parser);
    size_t before = pos != NULL && pos >= data && pos <= data + len ? (size_t)(pos - data) : len;
    if ((entry == SB_HTTP_REQ_IDLE || entry == SB_HTTP_REQ_HEAD) &&
        r->head_raw + before > r->limits.max_header_bytes)
      fail(r, 431, "request header fields too large");
    return len;
  }
  /* Every byte consumed before the head was complete is charged, whatever llhttp did with it
   * (blank lines before a request, blanks around values have no data callback). Parsing stops
   * where the head ends (HEAD_DONE for a request with a body, DONE for one without), so the
   * bytes of this feed are all head bytes when it began before the head was complete. */
  if (entry == SB_HTTP_REQ_IDLE || entry == SB_HTTP_REQ_HEAD) {
    r->head_raw += consumed;
    if (r->head_raw > r->limits.max_header_bytes && r->state != SB_HTTP_REQ_ERROR)
      fail(r, 431, "request header fields too large");
  }
  return consumed;
}

void sb_http_request_next(sb_http_request *r) {
  release(r);
  r->state = SB_HTTP_REQ_IDLE;
  llhttp_resume(&r->parser);
}

void sb_http_request_free(sb_http_request *r) { release(r); }

const char *sb_http_request_method(const sb_http_request *r) {
  return llhttp_method_name((llhttp_method_t)r->parser.method);
}

int sb_http_request_version_minor(const sb_http_request *r) { return r->parser.http_minor; }

bool sb_http_request_is_head(const sb_http_request *r) { return r->parser.method == HTTP_HEAD; }

void sb_http_split_target(const char *target, size_t len, const char **path, size_t *path_len,
                          const char **query, size_t *query_len) {
  const char *end = target + len;
  const char *p = target;
  /* absolute-form: skip "scheme://authority" */
  const char *scheme_end = memchr(target, ':', len);
  if (len > 0 && target[0] != '/' && scheme_end != NULL && end - scheme_end >= 3 &&
      scheme_end[1] == '/' && scheme_end[2] == '/') {
    p = scheme_end + 3;
    while (p < end && *p != '/' && *p != '?' && *p != '#')
      p++;
  }
  const char *q = p;
  while (q < end && *q != '?' && *q != '#')
    q++;
  *path = p;
  *path_len = (size_t)(q - p);
  if (*path_len == 0 && p != target) {
    *path = "/";
    *path_len = 1;
  }
  *query = "";
  *query_len = 0;
  if (q < end && *q == '?') {
    const char *qs = q + 1;
    const char *qe = qs;
    while (qe < end && *qe != '#')
      qe++;
    *query = qs;
    *query_len = (size_t)(qe - qs);
  }
}
