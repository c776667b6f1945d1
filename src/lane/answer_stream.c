/* See answer_stream.h. */
#include "answer_stream.h"
#include "../json/json_text.h"

#include <stdlib.h>
#include <string.h>

size_t sb_answer_stream_reserve(int64_t remaining_ms, int64_t grace_ms, int64_t heartbeat_ms,
                                size_t margin) {
  if (heartbeat_ms <= 0)
    return 0;
  int64_t span = (remaining_ms > 0 ? remaining_ms : 0) + (grace_ms > 0 ? grace_ms : 0);
  return (size_t)((span + heartbeat_ms - 1) / heartbeat_ms) + margin;
}

static void put(void *ctx, const char *bytes, size_t n) {
  sb_answer_stream *s = ctx;
  if (s->failed || n == 0)
    return;
  if (s->held_len + n > s->held_cap) {
    size_t cap = s->held_cap ? s->held_cap : 4096;
    while (cap < s->held_len + n)
      cap *= 2;
    char *grown = realloc(s->held, cap);
    if (grown == NULL) {
      s->failed = true;
      return;
    }
    s->held = grown;
    s->held_cap = cap;
  }
  memcpy(s->held + s->held_len, bytes, n);
  s->held_len += n;
}

void sb_answer_stream_start(sb_answer_stream *s, size_t reserve) {
  memset(s, 0, sizeof *s);
  s->reserve = reserve;
  s->valid = true;
  put(s, "{\"stdout\":\"", 11);
}

bool sb_answer_stream_feed(sb_answer_stream *s, const char *so_far, size_t len, bool final) {
  if (len > s->taken)
    s->taken += sb_json_text_part(so_far + s->taken, len - s->taken, final, &s->valid, put, s);
  return !s->failed;
}

size_t sb_answer_stream_ready(const sb_answer_stream *s) {
  return s->held_len > s->reserve ? s->held_len - s->reserve : 0;
}

void sb_answer_stream_sent(sb_answer_stream *s, size_t n) {
  if (n > s->held_len)
    n = s->held_len;
  memmove(s->held, s->held + n, s->held_len - n); /* the reserve: a few hundred bytes */
  s->held_len -= n;
}

void sb_answer_stream_free(sb_answer_stream *s) {
  free(s->held);
  s->held = NULL;
  s->held_len = s->held_cap = 0;
}
