/* libFuzzer target for src/sse/sse.c, the parser of a model's streamed answer (bytes from the
 * network). The first input byte picks where the rest is cut into feeds. Properties:
 *   - no out-of-bounds access or leak (ASan), whatever the bytes;
 *   - the events do not depend on how the stream is cut: whole and split feeds agree;
 *   - the parser never holds more than its bound, and a refusal is sticky. */
#include "sse/sse.h"

#include <stdint.h>
#include <stdlib.h>
#include <string.h>

enum { BOUND = 512 };

typedef struct {
  uint64_t hash; /* FNV-1a over every event's type and data, with separators */
  size_t count;
} digest;

static void mix(digest *d, const char *s, size_t n) {
  for (size_t i = 0; i < n; i++)
    d->hash = (d->hash ^ (uint8_t)s[i]) * 1099511628211ull;
  d->hash = (d->hash ^ 0x100) * 1099511628211ull;
}

static int on_event(void *ud, const char *type, size_t tl, const char *data, size_t dl) {
  digest *d = ud;
  if (tl == 0)
    abort(); /* a dispatched event always has a type */
  mix(d, type, tl);
  mix(d, data, dl);
  d->count++;
  return 0;
}

static int run(const uint8_t *data, size_t size, size_t step, digest *d) {
  sb_sse p;
  sb_sse_init(&p, BOUND);
  int rc = SB_SSE_OK;
  for (size_t i = 0; i < size; i += step) {
    size_t n = size - i < step ? size - i : step;
    int r = sb_sse_feed(&p, (const char *)data + i, n, on_event, d);
    if (sb_sse_buffered(&p) > BOUND)
      abort();
    if (rc != SB_SSE_OK && r != rc)
      abort(); /* a refusal must stick */
    rc = r;
  }
  sb_sse_free(&p);
  return rc;
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
  if (size == 0)
    return 0;
  size_t step = (size_t)(data[0] % 7) + 1;
  data++;
  size--;
  digest whole = {14695981039346656037ull, 0}, split = whole;
  int a = run(data, size, size ? size : 1, &whole);
  int b = run(data, size, step, &split);
  if (a == SB_SSE_OK && b == SB_SSE_OK &&
      (whole.count != split.count || whole.hash != split.hash))
    abort();
  return 0;
}
