/* libFuzzer target for the server's request path (src/http/server_request.c over llhttp).
 *
 * The input is the byte stream a connection receives. It is parsed twice: in one piece, and
 * in pseudo-random pieces (sizes drawn from a hash of the input), the way reads split it.
 * Besides the sanitizers' checks, every completed request must be well-formed (offsets inside
 * the head, lower-case token names, limits respected), and both runs must see the same
 * requests and the same final outcome. The one outcome allowed to differ is 431: the blanks
 * llhttp consumes without a callback are charged per read, so where a head ends relative to
 * the limit can depend on how it was split. */
#include "http/server_request.h"
#include "http/server_response.h"

#include <stdint.h>
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
    if (r.state == SB_HTTP_REQ_DONE) {
      check_request(&r, &o);
      if (r.upgrade) /* the rest of the stream would not be HTTP */
        break;
      sb_http_request_next(&r);
    } else if (r.state == SB_HTTP_REQ_ERROR) {
      if (r.error_status != 400 && r.error_status != 413 && r.error_status != 431)
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

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
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
