/* Unit tests for src/json/json_text.c's writers (issue 43: the stream's encoder in 16- and
 * 32-byte blocks): every escape and every UTF-8 rule at each offset around a block's edges, in
 * one piece and cut into pieces, each writer against a literal written out by hand here — and
 * into a buffer of exactly the room the contract gives (6 bytes a byte), so that a block stored
 * past it is ASan's to see. */
#include "json/json_text.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "check.h"

static const char *const writer_names[] = {"bytes", "sse2", "avx2", "chosen"};
enum { CHOSEN = 3 };

/* s[0..n) through one writer in pieces of `piece` bytes (the last with final), into a buffer of
 * exactly 6·n; returns it (malloc'd, NUL-ended) and the valid flag. */
static char *write_with(int writer, const char *s, size_t n, size_t piece, bool *valid) {
  char *dst = malloc(SB_JSON_TEXT_MAX_GROWTH * n + 1);
  size_t at = 0, end = 0, written = 0;
  *valid = true;
  while (at < n) {
    end = end + piece < n ? end + piece : n;
    size_t w, k;
    if (writer == CHOSEN)
      k = sb_json_text_into(dst + written, s + at, end - at, end == n, valid, &w);
    else
      k = sb_json_text_into_with((sb_json_text_writer)writer, dst + written, s + at, end - at,
                                 end == n, valid, &w);
    CHECK(k <= end - at && end - at - k <= 3, "a piece leaves at most a cut sequence");
    written += w;
    at += k;
  }
  if (n == 0)
    dst = realloc(dst, 1);
  dst[written] = '\0';
  return dst;
}

static bool available(int writer) {
  return writer == CHOSEN || sb_json_text_writer_available((sb_json_text_writer)writer);
}

/* `special` (its bytes) at offset `at` of a run of 'a' (total length n), and each writer's text
 * of it against `want` at the same offset, whole and in pieces of 1, 7, 16, 31 and 32 bytes. */
static void check_at(const char *special, size_t special_len, const char *want, bool want_valid,
                     size_t at, size_t n) {
  char *in = malloc(n), *expect = malloc(n * 6 + 1);
  memset(in, 'a', n);
  memcpy(in + at, special, special_len);
  memset(expect, 'a', at);
  size_t e = at + strlen(want);
  memcpy(expect + at, want, strlen(want));
  memset(expect + e, 'a', n - at - special_len);
  expect[e + n - at - special_len] = '\0';
  static const size_t pieces[] = {1, 7, 16, 31, 32, 1 << 20};
  for (int writer = 0; writer <= CHOSEN; writer++) {
    if (!available(writer))
      continue;
    for (size_t p = 0; p < sizeof pieces / sizeof pieces[0]; p++) {
      bool valid;
      char *got = write_with(writer, in, n, pieces[p], &valid);
      CHECK(strcmp(got, expect) == 0 && valid == want_valid,
            "%s: bytes %zu at %zu of %zu, pieces of %zu: got \"%s\" (valid %d)",
            writer_names[writer], special_len, at, n, pieces[p], got, valid);
      free(got);
    }
  }
  free(in);
  free(expect);
}

typedef struct {
  const char *in;
  size_t len;
  const char *want;
  bool valid;
} text_case;

#define FFFD "\xEF\xBF\xBD"
static const text_case cases[] = {
    /* every ASCII escape */
    {"\n", 1, "\\n", true},
    {"\r", 1, "\\r", true},
    {"\t", 1, "\\t", true},
    {"\b", 1, "\\b", true},
    {"\f", 1, "\\f", true},
    {"\"", 1, "\\\"", true},
    {"\\", 1, "\\\\", true},
    {"\x00", 1, "\\u0000", true},
    {"\x01", 1, "\\u0001", true},
    {"\x0b", 1, "\\u000b", true},
    {"\x1f", 1, "\\u001f", true},
    {"\x7f", 1, "\\u007f", true},
    {" ~/", 3, " ~/", true},
    {"\n\n\"\x01", 4, "\\n\\n\\\"\\u0001", true},
    /* valid UTF-8 at the edges of RFC 3629's ranges */
    {"\xC2\x80", 2, "\xC2\x80", true},
    {"\xDF\xBF", 2, "\xDF\xBF", true},
    {"\xE0\xA0\x80", 3, "\xE0\xA0\x80", true},
    {"\xED\x9F\xBF", 3, "\xED\x9F\xBF", true},
    {"\xEF\xBF\xBF", 3, "\xEF\xBF\xBF", true},
    {"\xF0\x90\x80\x80", 4, "\xF0\x90\x80\x80", true},
    {"\xF4\x8F\xBF\xBF", 4, "\xF4\x8F\xBF\xBF", true},
    {"\xC3\xA9\xE4\xB8\x96\xF0\x9F\x98\x80", 9, "\xC3\xA9\xE4\xB8\x96\xF0\x9F\x98\x80", true},
    /* invalid: each byte that starts no valid sequence is one U+FFFD, and the scan goes on at
     * the next byte */
    {"\x80", 1, FFFD, false},
    {"\xBF", 1, FFFD, false},
    {"\xC0\x80", 2, FFFD FFFD, false},           /* overlong */
    {"\xC1\xBF", 2, FFFD FFFD, false},           /* overlong */
    {"\xE0\x9F\xBF", 3, FFFD FFFD FFFD, false},  /* overlong */
    {"\xED\xA0\x80", 3, FFFD FFFD FFFD, false},  /* a surrogate */
    {"\xF0\x8F\xBF\xBF", 4, FFFD FFFD FFFD FFFD, false}, /* overlong */
    {"\xF4\x90\x80\x80", 4, FFFD FFFD FFFD FFFD, false}, /* past U+10FFFF */
    {"\xF5\x80", 2, FFFD FFFD, false},
    {"\xFF", 1, FFFD, false},
    {"\xC3" "a", 2, FFFD "a", false},            /* a lead with no continuation */
    {"\xE4\xB8" "a", 3, FFFD FFFD "a", false},  /* cut short */
    {"\xC3\xA9\x80", 3, "\xC3\xA9" FFFD, false}, /* a stray continuation after a valid one */
};

/* A sequence cut at the very end of a piece that is not the last: left to the next call. */
static void check_cut(void) {
  static const char text[] = "\xF0\x9F\x98\x80"; /* U+1F600 */
  for (int writer = 0; writer <= CHOSEN; writer++) {
    if (!available(writer))
      continue;
    for (size_t lead = 0; lead < 70; lead++) {
      for (size_t cut = 1; cut < 4; cut++) {
        char in[80], dst[80 * 6];
        memset(in, 'a', lead);
        memcpy(in + lead, text, cut);
        bool valid = true;
        size_t w, k;
        if (writer == CHOSEN)
          k = sb_json_text_into(dst, in, lead + cut, false, &valid, &w);
        else
          k = sb_json_text_into_with((sb_json_text_writer)writer, dst, in, lead + cut, false,
                                     &valid, &w);
        CHECK(k == lead && w == lead && valid, "%s: %zu of 4 bytes after %zu: took %zu wrote %zu",
              writer_names[writer], cut, lead, k, w);
        /* the same at the last piece: each byte replaced */
        valid = true;
        if (writer == CHOSEN)
          k = sb_json_text_into(dst, in, lead + cut, true, &valid, &w);
        else
          k = sb_json_text_into_with((sb_json_text_writer)writer, dst, in, lead + cut, true,
                                     &valid, &w);
        CHECK(k == lead + cut && w == lead + 3 * cut && !valid, "%s: %zu cut bytes at the end",
              writer_names[writer], cut);
      }
    }
  }
}

/* The worst case (every byte a \u00XX) fills the room exactly; under ASan a store past it fails. */
static void check_room(void) {
  for (int writer = 0; writer <= CHOSEN; writer++) {
    if (!available(writer))
      continue;
    for (size_t n = 1; n <= 100; n++) {
      char *in = malloc(n);
      memset(in, 0x01, n);
      bool valid;
      char *got = write_with(writer, in, n, n, &valid);
      CHECK(strlen(got) == 6 * n, "%s: %zu control bytes", writer_names[writer], n);
      free(got);
      memset(in, '\n', n);
      got = write_with(writer, in, n, n, &valid);
      CHECK(strlen(got) == 2 * n, "%s: %zu newlines", writer_names[writer], n);
      free(got);
      free(in);
    }
  }
}

int main(void) {
  /* each case at every offset across the first two 32-byte blocks, in inputs that end in the
   * middle of a block, at its edge and past it */
  for (size_t c = 0; c < sizeof cases / sizeof cases[0]; c++)
    for (size_t n = cases[c].len; n <= 100; n += 11)
      for (size_t at = 0; at + cases[c].len <= n; at++)
        check_at(cases[c].in, cases[c].len, cases[c].want, cases[c].valid, at, n);
  for (size_t c = 0; c < sizeof cases / sizeof cases[0]; c++) /* 15/16, 31/32, 63/64 too */
    for (size_t at = 0; at + cases[c].len <= 70; at++)
      check_at(cases[c].in, cases[c].len, cases[c].want, cases[c].valid, at, 70);
  check_cut();
  check_room();
  printf("json_text writers:");
  for (int writer = 0; writer < CHOSEN; writer++)
    if (available(writer))
      printf(" %s", writer_names[writer]);
  printf("; %d failures\n", failures);
  return failures == 0 ? 0 : 1;
}
