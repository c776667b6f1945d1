/* The server-sent-events parser (see sse.h). One pass over the fed bytes: a line that ends
 * inside the chunk is handled in place, only a line cut by the chunk's end is copied. */
#include "sse.h"

#include <stdlib.h>
#include <string.h>

static const char DEFAULT_TYPE[] = "message";

void sb_sse_init(sb_sse *p, size_t max_event_bytes) {
  memset(p, 0, sizeof *p);
  p->max_event_bytes = max_event_bytes;
}

void sb_sse_free(sb_sse *p) {
  free(p->line.data);
  free(p->type.data);
  free(p->data.data);
  p->line = p->type = p->data = (sb_sse_buf){0};
}

size_t sb_sse_buffered(const sb_sse *p) { return p->line.len + p->type.len + p->data.len; }

/* Appends n bytes, keeping the whole event within the bound. */
static int put(sb_sse *p, sb_sse_buf *b, const char *s, size_t n) {
  if (n > p->max_event_bytes || sb_sse_buffered(p) > p->max_event_bytes - n)
    return SB_SSE_TOO_LARGE;
  if (b->len + n > b->cap) {
    size_t cap = b->cap ? b->cap : 256;
    while (cap < b->len + n)
      cap *= 2;
    char *grown = realloc(b->data, cap);
    if (grown == NULL)
      return SB_SSE_NOMEM;
    b->data = grown;
    b->cap = cap;
  }
  if (n > 0)
    memcpy(b->data + b->len, s, n);
  b->len += n;
  return SB_SSE_OK;
}

static int dispatch(sb_sse *p, sb_sse_event_fn fn, void *ud) {
  if (p->data.len == 0) { /* no data field: nothing to dispatch, the type is forgotten */
    p->type.len = 0;
    return SB_SSE_OK;
  }
  const char *type = p->type.len ? p->type.data : DEFAULT_TYPE;
  size_t type_len = p->type.len ? p->type.len : sizeof DEFAULT_TYPE - 1;
  p->events++;
  int rc = fn(ud, type, type_len, p->data.data, p->data.len - 1); /* without the last LF */
  p->type.len = 0;
  p->data.len = 0;
  return rc;
}

static bool field_is(const char *name, size_t len, const char *want) {
  size_t wl = strlen(want);
  return len == wl && memcmp(name, want, wl) == 0;
}

/* One complete line (without its terminator). line may point into p->line. */
static int process_line(sb_sse *p, const char *line, size_t len, sb_sse_event_fn fn, void *ud) {
  if (!p->bom_checked) {
    p->bom_checked = true;
    if (len >= 3 && memcmp(line, "\xEF\xBB\xBF", 3) == 0) {
      line += 3;
      len -= 3;
    }
  }
  if (len == 0)
    return dispatch(p, fn, ud);
  if (line[0] == ':')
    return SB_SSE_OK; /* a comment (servers use them as keep-alives) */
  const char *colon = memchr(line, ':', len);
  size_t name_len = colon ? (size_t)(colon - line) : len;
  const char *value = colon ? colon + 1 : line + len;
  size_t value_len = colon ? len - name_len - 1 : 0;
  if (value_len > 0 && value[0] == ' ') {
    value++;
    value_len--;
  }
  /* The line itself may sit in p->line, which counts against the bound: it is about to be
   * dropped, so measure the event without it. */
  size_t held_line = p->line.len;
  p->line.len = 0;
  int rc = SB_SSE_OK;
  if (field_is(line, name_len, "data")) {
    rc = put(p, &p->data, value, value_len);
    if (rc == SB_SSE_OK)
      rc = put(p, &p->data, "\n", 1);
  } else if (field_is(line, name_len, "event")) {
    p->type.len = 0;
    rc = put(p, &p->type, value, value_len);
  } /* id, retry and unknown fields: ignored */
  p->line.len = held_line;
  return rc;
}

int sb_sse_feed(sb_sse *p, const char *bytes, size_t n, sb_sse_event_fn fn, void *ud) {
  if (p->failed)
    return p->failed;
  size_t i = 0;
  while (i < n) {
    if (p->skip_lf) {
      p->skip_lf = false;
      if (bytes[i] == '\n') {
        i++;
        continue;
      }
    }
    /* memchr for LF, then for a CR before it: two vectorized scans per line */
    const char *lf = memchr(bytes + i, '\n', n - i);
    size_t end = lf ? (size_t)(lf - bytes) : n;
    const char *cr = memchr(bytes + i, '\r', end - i);
    size_t j = cr ? (size_t)(cr - bytes) : end;
    if (j == n) { /* the chunk ends inside a line: keep it for the next feed */
      int rc = put(p, &p->line, bytes + i, n - i);
      if (rc != SB_SSE_OK)
        return p->failed = rc;
      break;
    }
    const char *line = bytes + i;
    size_t len = j - i;
    if (p->line.len > 0) {
      int rc = put(p, &p->line, bytes + i, len);
      if (rc != SB_SSE_OK)
        return p->failed = rc;
      line = p->line.data;
      len = p->line.len;
    }
    p->skip_lf = bytes[j] == '\r';
    i = j + 1;
    int rc = process_line(p, line, len, fn, ud);
    p->line.len = 0;
    if (rc < 0)
      return p->failed = rc;
    if (rc != 0)
      return rc;
  }
  return SB_SSE_OK;
}
