/* The log line's formatter before session 8 (src/log/log.c's printf/strftime code), kept
 * verbatim but for its clock (an argument) and its out-of-memory path (abort): the reference
 * that tests/c/test_log_line.c and tests/fuzz/fuzz_log_line.c compare the hand-made line with. */
#ifndef SB_LOG_LINE_REFERENCE_H
#define SB_LOG_LINE_REFERENCE_H

#include "log/log.h"

#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/time.h>
#include <time.h>

typedef struct {
  char *data;
  size_t len, cap;
} strbuf;

static void sb_put(strbuf *b, const char *s, size_t n) {
  size_t need = b->len + n + 1;
  if (need > b->cap) {
    size_t cap = b->cap ? b->cap : 256;
    while (cap < need)
      cap *= 2;
    b->data = realloc(b->data, cap);
    if (b->data == NULL)
      abort();
    b->cap = cap;
  }
  memcpy(b->data + b->len, s, n);
  b->len += n;
  b->data[b->len] = '\0';
}

static void sb_puts(strbuf *b, const char *s) { sb_put(b, s, strlen(s)); }

static int level_rank(const char *level) {
  static const char *names[] = {"debug", "info", "warn", "error"};
  for (int i = 0; i < 4; i++)
    if (strcmp(level, names[i]) == 0)
      return i;
  return 1;
}

static void old_put_escaped(strbuf *b, const char *s) {
  for (const unsigned char *p = (const unsigned char *)s; *p; p++) {
    char tmp[8];
    switch (*p) {
    case '"': sb_puts(b, "\\\""); break;
    case '\\': sb_puts(b, "\\\\"); break;
    case '\n': sb_puts(b, "\\n"); break;
    case '\r': sb_puts(b, "\\r"); break;
    case '\t': sb_puts(b, "\\t"); break;
    default:
      if (*p < 0x20) {
        snprintf(tmp, sizeof tmp, "\\u%04x", *p);
        sb_puts(b, tmp);
      } else {
        sb_put(b, (const char *)p, 1);
      }
    }
  }
}

static bool old_needs_quotes(const char *s) {
  if (*s == '\0')
    return true;
  for (; *s; s++)
    if (*s == ' ' || *s == '"' || *s == '=' || (unsigned char)*s < 0x20)
      return true;
  return false;
}

static void old_put_timestamp(strbuf *b, struct timeval tv) {
  struct tm tm;
  gmtime_r(&tv.tv_sec, &tm);
  char ts[40];
  size_t n = strftime(ts, sizeof ts, "%Y-%m-%dT%H:%M:%S", &tm);
  snprintf(ts + n, sizeof ts - n, ".%03dZ", (int)(tv.tv_usec / 1000));
  sb_puts(b, ts);
}

static const char *old_journal_prefix(const char *level) {
  static const char *prefixes[] = {"<7>", "<6>", "<4>", "<3>"};
  return prefixes[level_rank(level)];
}

static void old_format(strbuf *b, bool json, bool journal, const char *level, const char *event,
                       const sb_log_field *fields, size_t n, struct timeval tv) {
  if (journal)
    sb_puts(b, old_journal_prefix(level));
  if (json) {
    sb_puts(b, "{\"ts\":\"");
    old_put_timestamp(b, tv);
    sb_puts(b, "\",\"level\":\"");
    old_put_escaped(b, level);
    sb_puts(b, "\",\"event\":\"");
    old_put_escaped(b, event);
    sb_puts(b, "\"");
    for (size_t i = 0; i < n; i++) {
      sb_puts(b, ",\"");
      old_put_escaped(b, fields[i].key);
      sb_puts(b, "\":");
      if (fields[i].raw) {
        sb_puts(b, fields[i].value);
      } else {
        sb_puts(b, "\"");
        old_put_escaped(b, fields[i].value);
        sb_puts(b, "\"");
      }
    }
    sb_puts(b, "}\n");
  } else {
    if (!journal) {
      old_put_timestamp(b, tv);
      sb_puts(b, " ");
    }
    sb_puts(b, level);
    sb_puts(b, " ");
    old_put_escaped(b, event);
    for (size_t i = 0; i < n; i++) {
      sb_puts(b, " ");
      old_put_escaped(b, fields[i].key);
      sb_puts(b, "=");
      bool quote = !fields[i].raw && old_needs_quotes(fields[i].value);
      if (quote)
        sb_puts(b, "\"");
      old_put_escaped(b, fields[i].value);
      if (quote)
        sb_puts(b, "\"");
    }
    sb_puts(b, "\n");
  }
}

#endif
