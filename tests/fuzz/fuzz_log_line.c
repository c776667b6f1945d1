/* libFuzzer target for src/log/log_line.c, the log line made by hand: its text comes from the
 * network (thread labels, remote addresses, request fields). The input is split at NUL bytes
 * into the event and key/value pairs (the first five bytes choose the format, the journal, raw
 * values, the level and the time: a level, like a raw value, is the caller's word, not the
 * network's). Properties checked on every input:
 *   - formatting never reads or writes out of bounds (ASan), whatever the bytes;
 *   - the line is byte for byte the one the printf/strftime formatter made
 *     (tests/c/log_line_reference.h), in both formats, on the journal and not;
 *   - it is one line: one '\n', at its end. */
#include "log/log_line.h"
#include "../c/log_line_reference.h"

#include <stdint.h>
#include <stdlib.h>
#include <string.h>

enum { MAX_FIELDS = 32 };

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
  if (size < 5)
    return 0;
  uint8_t mode = data[0];
  uint32_t when;
  memcpy(&when, data + 1, sizeof when);
  /* the NUL-split strings need a terminator of their own after the input */
  char *text = malloc(size - 5 + 1);
  memcpy(text, data + 5, size - 5);
  text[size - 5] = '\0';
  const char *parts[1 + 2 * MAX_FIELDS];
  size_t n_parts = 0;
  for (char *p = text; n_parts < sizeof parts / sizeof parts[0]; p += strlen(p) + 1) {
    parts[n_parts++] = p;
    if (p + strlen(p) == text + (size - 5))
      break;
  }
  sb_log_field fields[MAX_FIELDS];
  size_t n = 0;
  /* a raw value is a number the caller wrote, never a line break: JSON writes it verbatim */
  for (size_t i = 1; i + 1 < n_parts; i += 2, n++)
    fields[n] = (sb_log_field){parts[i], parts[i + 1],
                               (((mode >> 2) >> (n % 6)) & 1) && strchr(parts[i + 1], '\n') == NULL};
  static const char *levels[] = {"debug", "info", "warn", "error", "other"};
  const char *level = levels[when % 5], *event = parts[0];
  bool json = mode & 1, journal = (mode >> 1) & 1;
  struct timeval tv = {.tv_sec = (time_t)(when >> 4) * 37, .tv_usec = (long)(when % 1000000)};

  strbuf want = {0};
  old_format(&want, json, journal, level, event, fields, n, tv);
  sb_log_line got;
  sb_log_line_init(&got);
  sb_log_line_format(&got, (sb_log_line_style){.json = json, .journal = journal}, level, event,
                     fields, n, tv.tv_sec, (long)tv.tv_usec);
  if (got.len != want.len || memcmp(got.data, want.data, got.len) != 0)
    abort(); /* a byte differs from the reference formatter's */
  if (memchr(got.data, '\n', got.len) != got.data + got.len - 1)
    abort(); /* a field broke the line */
  sb_log_line_free(&got);
  free(want.data);
  free(text);
  return 0;
}
