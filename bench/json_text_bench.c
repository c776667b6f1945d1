/* The stream's encoder alone (issue 43, the 1 MB row): the megabyte the 1 MB bench's command
 * writes (`yes` of a 73-letter line: 74-byte lines, one "\n" escape each), a UTF-8 text and a
 * control-heavy binary, each encoded as the exec lane's answer stream does — 16 KiB pieces into
 * a held buffer (src/lane/answer_stream.c) — by each of sb_json_text_into's writers, against a
 * memcpy of the same megabyte (the floor: a copy has to happen). Best of N rounds per figure,
 * the writers taken in turn each round so that the machine's load falls on all alike.
 *   build/bench/bench_json_text [rounds [input]]   (default 200, every input; one input only
 *   for `perf stat`, whose instruction and cycle counts the load moves least) */
#include "json/json_text.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

enum { MEGABYTE = 1000000, PIECE = 16 * 1024 };

static double now_us(void) {
  struct timespec t;
  clock_gettime(CLOCK_MONOTONIC, &t);
  return (double)t.tv_sec * 1e6 + (double)t.tv_nsec / 1e3;
}

/* One megabyte in pieces as the answer stream feeds it; returns the bytes written. */
static size_t encode(int writer, char *dst, const char *src, size_t n) {
  size_t at = 0, written = 0;
  bool valid = true;
  while (at < n) {
    size_t piece = n - at < PIECE ? n - at : PIECE, w;
    size_t took = writer < 0 ? (memcpy(dst + written, src + at, piece), w = piece, piece)
                             : sb_json_text_into_with((sb_json_text_writer)writer, dst + written,
                                                      src + at, piece, at + piece == n, &valid, &w);
    written += w;
    at += took;
  }
  return written;
}

static void fill(const char *kind, char *s, size_t n) {
  static const char line[] =
      "aaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaa\n";
  static const char utf8[] = "Grüße, 世界 — naïve café ✓ ";
  unsigned seed = 1;
  for (size_t i = 0; i < n; i++) {
    if (strcmp(kind, "yes") == 0) {
      s[i] = line[i % (sizeof line - 1)];
    } else if (strcmp(kind, "utf8") == 0) {
      s[i] = utf8[i % (sizeof utf8 - 1)];
    } else {
      seed = seed * 1103515245u + 12345u;
      s[i] = (char)(seed >> 16);
    }
  }
}

int main(int argc, char **argv) {
  int rounds = argc > 1 ? atoi(argv[1]) : 200;
  static const char *const kinds[] = {"yes", "utf8", "binary"};
  static const char *const names[] = {"memcpy", "bytes", "sse2", "avx2"};
  char *src = malloc(MEGABYTE);
  char *dst = malloc((size_t)SB_JSON_TEXT_MAX_GROWTH * MEGABYTE);
  if (src == NULL || dst == NULL)
    return 1;
  printf("%-7s %-7s %10s %8s %10s\n", "input", "writer", "best_us", "x_memcpy", "out_bytes");
  for (size_t k = 0; k < sizeof kinds / sizeof kinds[0]; k++) {
    if (argc > 2 && strcmp(argv[2], kinds[k]) != 0)
      continue;
    fill(kinds[k], src, MEGABYTE);
    double best[4] = {1e18, 1e18, 1e18, 1e18};
    size_t out[4] = {0};
    for (int r = 0; r < rounds; r++) {
      for (int writer = -1; writer <= SB_JSON_TEXT_AVX2; writer++) {
        if (writer >= 0 && !sb_json_text_writer_available((sb_json_text_writer)writer))
          continue;
        double t0 = now_us();
        out[writer + 1] = encode(writer, dst, src, MEGABYTE);
        double t = now_us() - t0;
        if (t < best[writer + 1])
          best[writer + 1] = t;
      }
    }
    for (int j = 0; j < 4; j++)
      if (out[j] > 0)
        printf("%-7s %-7s %10.1f %8.2f %10zu\n", kinds[k], names[j], best[j], best[j] / best[0],
               out[j]);
  }
  free(src);
  free(dst);
  return 0;
}
