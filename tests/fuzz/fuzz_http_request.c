/* libFuzzer target for the server's request path (src/http/server_request.c over llhttp).
 *
 * The input is the byte stream a connection receives. It is parsed twice: in one piece, and
 * in pseudo-random pieces (sizes drawn from a hash of the input), the way reads split it.
 * Besides the sanitizers' checks, every completed request must be well-formed (offsets inside
 * the head, lower-case token names, limits respected), and both runs must see the same
 * requests and the same final outcome. The one outcome allowed to differ is 431: llhttp hands
 * a span (a header value, a trailer) to the callbacks only when it ends or the read ends, so
 * the bytes of a span that an error cuts short are charged under one split and not under
 * another. (Bytes before a head is complete are all charged, however the reads split them.)
 * The response framing is fuzzed from the same bytes (fuzz_framing). */
#include "http/server_request.h"
#include "http/server_response.h"

#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

static const sb_http_request_limits limits = {2048, 8192};

typedef struct {
  uint64_t digest; /* FNV-1a over every completed request, in order */
  int requests;
  int final_status; /* 0: input ended mid-request or between requests */
} outcome;

static void mix(uint64_t *h, const void *p, size_t n) {
  const unsigned char *b = p;
  for (size_t i = 0; i < n; i++) {
    *h ^= b[i];
    *h *= 1099511628211ull;
  }
}

static void check_request(const sb_http_request *r, outcome *o) {
  if (r->target_len > r->head_len || r->body_len > limits.max_body_bytes ||
      (r->body_len > 0 && r->body == NULL))
    abort();
  if (r->head_counted > limits.max_header_bytes || r->head_raw > limits.max_header_bytes)
    abort();
  const char *path, *query;
  size_t path_len, query_len;
  sb_http_split_target(r->head, r->target_len, &path, &path_len, &query, &query_len);
  bool path_inside = path >= r->head && path + path_len <= r->head + r->target_len;
  if (!path_inside && !(path_len == 1 && path[0] == '/'))
    abort();
  if (query_len > 0 && (query < r->head || query + query_len > r->head + r->target_len))
    abort();
  mix(&o->digest, r->head, r->target_len);
  for (size_t i = 0; i < r->n_headers; i++) {
    const sb_http_header *h = &r->headers[i];
    if ((size_t)h->name_off + h->name_len > r->head_len ||
        (size_t)h->value_off + h->value_len > r->head_len)
      abort();
    const char *name = sb_http_header_name(r, i);
    if (!sb_http_name_valid(name, h->name_len))
      abort();
    for (size_t k = 0; k < h->name_len; k++)
      if (name[k] >= 'A' && name[k] <= 'Z')
        abort();
    mix(&o->digest, name, h->name_len);
    mix(&o->digest, ":", 1);
    mix(&o->digest, sb_http_header_value(r, i), h->value_len);
  }
  mix(&o->digest, r->body, r->body_len);
  const char *method = sb_http_request_method(r);
  mix(&o->digest, method, strlen(method));
  uint8_t flags = (uint8_t)(r->keep_alive | r->upgrade << 1 | r->expect_continue << 2);
  mix(&o->digest, &flags, 1);
  o->requests++;
}

static outcome run(const uint8_t *data, size_t size, uint64_t split_seed) {
  outcome o = {14695981039346656037ull, 0, 0};
  sb_http_request r;
  sb_http_request_init(&r, &limits);
  size_t at = 0;
  uint64_t s = split_seed;
  while (at < size) {
    size_t n = size - at;
    if (split_seed != 0) {
      s = s * 6364136223846793005ull + 1442695040888963407ull;
      size_t piece = (size_t)(s >> 33) % 64 + 1;
      if (piece < n)
        n = piece;
    }
    size_t used = sb_http_request_feed(&r, (const char *)data + at, n);
    if (used > n)
      abort();
    at += used;
    if (r.state == SB_HTTP_REQ_HEAD_DONE) {
      /* the head of a request with a body: nothing of the body was consumed yet */
      size_t bound = sb_http_request_body_bound(&r);
      if (!r.has_body || bound == 0 || bound > limits.max_body_bytes || r.body_cap != 0)
        abort();
      if (r.head_raw > limits.max_header_bytes)
        abort();
      sb_http_request_accept_body(&r);
      if (r.state != SB_HTTP_REQ_BODY && r.state != SB_HTTP_REQ_ERROR)
        abort();
      continue;
    }
    if (r.state == SB_HTTP_REQ_DONE) {
      check_request(&r, &o);
      if (r.upgrade) /* the rest of the stream would not be HTTP */
        break;
      sb_http_request_next(&r);
    } else if (r.state == SB_HTTP_REQ_ERROR) {
      if (r.error_status != 400 && r.error_status != 413 && r.error_status != 417 &&
          r.error_status != 431 && r.error_status != 501 && r.error_status != 505)
        abort();
      char answer[512];
      size_t len = sb_http_engine_answer(answer, sizeof answer, r.error_status, r.error_text);
      if (len == 0 || len >= sizeof answer)
        abort();
      o.final_status = r.error_status;
      break;
    } else if (used < n) {
      abort(); /* the parser stops early only at a complete request or an error */
    }
  }
  sb_http_request_free(&r);
  return o;
}

/* The response framing (server_response.c) driven by the same bytes: a response shape from the
 * first bytes, then body writes of sizes taken from the rest. Whatever the sequence, a
 * content-length body never exceeds its length, chunks frame exactly their bytes, the head's
 * lines end with the blank line, and a body only a close can end clears keep-alive. */
static void fuzz_framing(const uint8_t *data, size_t size) {
  if (size < 4)
    return;
  static const int statuses[] = {200, 201, 204, 206, 301, 304, 400, 404, 500, 503};
  sb_http_frame f = {.status = statuses[data[0] % 10],
                     .head_request = data[1] & 1,
                     .http10 = data[1] & 2,
                     .keep_alive = data[1] & 4,
                     .handler_close = data[1] & 8,
                     .has_length = data[1] & 16,
                     .length_is_body = data[1] & 32,
                     .length = (uint64_t)data[2] * 257 + data[3]};
  bool keep_in = f.keep_alive;
  char lines[SB_HTTP_FRAME_LINES_MAX];
  size_t n = sb_http_frame_head(&f, lines);
  if (n < 2 || n > sizeof lines || memcmp(lines + n - 2, "\r\n", 2) != 0)
    abort();
  if (f.keep_alive && !keep_in)
    abort();
  uint64_t sent = 0;
  for (size_t i = 4; i + 1 < size; i += 2) {
    size_t want = (size_t)data[i] * 256 + data[i + 1];
    sb_http_body_piece piece;
    sb_http_body_verdict v = sb_http_frame_body(&f, want, &piece);
    if (v == SB_HTTP_BODY_SEND) {
      sent += want;
      if (f.framing == SB_HTTP_FRAME_CHUNKED &&
          (piece.prefix_len < 3 || strtoull(piece.prefix, NULL, 16) != want))
        abort();
      if (f.framing == SB_HTTP_FRAME_NONE)
        abort();
    } else if (v == SB_HTTP_BODY_OVER && f.framing != SB_HTTP_FRAME_LENGTH) {
      abort();
    }
  }
  if (f.framing == SB_HTTP_FRAME_LENGTH && sent + f.remaining != f.length)
    abort();
  char end[SB_HTTP_FRAME_END_MAX];
  bool short_body;
  size_t e = sb_http_frame_end(&f, end, &short_body);
  if ((f.framing == SB_HTTP_FRAME_CHUNKED) != (e == 5))
    abort();
  if ((short_body || f.framing == SB_HTTP_FRAME_CLOSE) && f.keep_alive)
    abort();
}

/* The lines server_response.c writes by hand, against the snprintf formats they replaced: a
 * length (up to 64 bits) taken from the first bytes, framed as a chunk and as a content-length,
 * and a status from the first two. */
static void fuzz_lines(const uint8_t *data, size_t size) {
  uint64_t v = 0;
  for (size_t i = 0; i < size && i < 8; i++)
    v = v << 8 | data[i];
  char got[SB_HTTP_FRAME_LINES_MAX], want[SB_HTTP_FRAME_LINES_MAX];
  size_t n = sb_http_chunk_prefix(got, (size_t)v);
  int w = snprintf(want, sizeof want, "%zx\r\n", (size_t)v);
  if (n != (size_t)w || memcmp(got, want, n) != 0)
    abort();
  sb_http_frame f = {.status = 200, .keep_alive = true, .has_length = true, .length = v};
  n = sb_http_frame_head(&f, got);
  w = snprintf(want, sizeof want, "content-length: %llu\r\n\r\n", (unsigned long long)v);
  if (n != (size_t)w || memcmp(got, want, n) != 0)
    abort();
  int status = size >= 2 ? (data[0] << 8 | data[1]) % 1000 : 200;
  n = sb_http_status_line(got, status);
  w = snprintf(want, sizeof want, "HTTP/1.1 %03d %s\r\n", status, sb_http_reason(status));
  if (n != (size_t)w || strcmp(got, want) != 0)
    abort();
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
  fuzz_lines(data, size);
  fuzz_framing(data, size);
  outcome whole = run(data, size, 0);
  uint64_t seed = 0x9e3779b97f4a7c15ull;
  mix(&seed, data, size < 32 ? size : 32);
  outcome split = run(data, size, seed | 1);
  if (whole.final_status == 431 || split.final_status == 431)
    return 0;
  if (whole.requests != split.requests || whole.digest != split.digest ||
      whole.final_status != split.final_status)
    abort();
  return 0;
}
