/* A long answer written while its command runs (issue 43's 1 MB row; docs/sandboxd.md "The exec
 * lane", "A long answer as it comes"). The document starts `{"stdout":"` once stdout has brought
 * more than the lane's threshold, and stdout's bytes go out escaped as they arrive
 * (sb_json_text_part: the same bytes sb_json_string writes for the whole). A JSON string cannot
 * carry a heartbeat space, so a small reserve of already-encoded bytes is held back: while the
 * command runs, each heartbeat sends one of them instead of a space, and the document stays
 * exactly the bytes it would have been. Pure: no Lua, no libuv. */
#ifndef SB_LANE_ANSWER_STREAM_H
#define SB_LANE_ANSWER_STREAM_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

typedef struct {
  char *held; /* encoded stdout not yet written */
  size_t held_len, held_cap;
  size_t taken;   /* stdout bytes encoded so far */
  size_t reserve; /* encoded bytes kept back for the heartbeats still to come */
  bool valid;     /* stdout was valid UTF-8 so far */
  bool failed;    /* out of memory: the stream cannot go on */
} sb_answer_stream;

/* The bytes to hold back for a stream that starts with remaining_ms of the command's budget
 * left: one per heartbeat until the deadline and the kill grace have passed, and `margin` more
 * (the policy's sandbox.stream_reserve_margin: the pipes' linger after the end, a late timer).
 * 0 without heartbeats. */
size_t sb_answer_stream_reserve(int64_t remaining_ms, int64_t grace_ms, int64_t heartbeat_ms,
                                size_t margin);

/* A stream holding back `reserve` bytes; its first bytes are the document's `{"stdout":"`. */
void sb_answer_stream_start(sb_answer_stream *s, size_t reserve);

/* stdout so far (the capture: every byte since the start, len of them): the bytes not yet taken
 * are encoded onto what is held; with final, all of them (an incomplete UTF-8 sequence at the
 * end becomes U+FFFD, as the whole document would have it). False when memory ran out. */
bool sb_answer_stream_feed(sb_answer_stream *s, const char *so_far, size_t len, bool final);

/* How many held bytes may go out now: all but the reserve. */
size_t sb_answer_stream_ready(const sb_answer_stream *s);

/* The first n held bytes went out. */
void sb_answer_stream_sent(sb_answer_stream *s, size_t n);

void sb_answer_stream_free(sb_answer_stream *s);

#endif
