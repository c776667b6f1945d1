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

enum {
  FEED_PIECE = 16 * 1024, /* stdout encoded per call into the held buffer */
};

/* Room for `room` more held bytes; false when memory ran out. */
static bool held_room(sb_answer_stream *s, size_t room) {
  if (s->held_cap - s->held_len >= room)
    return true;
  size_t cap = s->held_cap ? s->held_cap : 4096;
  while (cap - s->held_len < room)
    cap *= 2;
  char *grown = realloc(s->held, cap);
  if (grown == NULL) {
    s->failed = true;
    return false;
  }
  s->held = grown;
  s->held_cap = cap;
  return true;
}

static void put(void *ctx, const char *bytes, size_t n) {
  sb_answer_stream *s = ctx;
  if (s->failed || n == 0 || !held_room(s, n))
    return;
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
  /* encoded straight into the held buffer (sb_json_text_into), a piece at a time so that the
   * worst case's room (6 bytes a byte) stays ~100 KiB whatever the feed */
  while (!s->failed && len > s->taken) {
    size_t piece = len - s->taken < FEED_PIECE ? len - s->taken : FEED_PIECE;
    bool last = piece == len - s->taken;
    if (!held_room(s, SB_JSON_TEXT_MAX_GROWTH * piece))
      break;
    size_t written;
    size_t taken = sb_json_text_into(s->held + s->held_len, so_far + s->taken, piece,
                                     final && last, &s->valid, &written);
    s->held_len += written;
    s->taken += taken;
    if (taken < piece && last) /* a UTF-8 sequence cut at the very end: the next read's */
      break;
  }
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
