/* The bytes of one log line (see log_line.h). */
#include "log_line.h"

#include <stdint.h>
#include <stdlib.h>
#include <string.h>

void sb_log_line_init(sb_log_line *line) {
  line->data = line->inline_bytes;
  line->len = 0;
  line->cap = sizeof line->inline_bytes;
}

void sb_log_line_free(sb_log_line *line) {
  if (line->data != line->inline_bytes)
    free(line->data);
  sb_log_line_init(line);
}

/* Room for n more bytes; false when there is none to be had (the piece is then dropped, as
 * the line's rest would be: a log line never stops the loop). */
static bool reserve(sb_log_line *line, size_t n) {
  if (n > SIZE_MAX / 4 - line->len)
    return false; /* absurd sizes: drop, never wrap */
  size_t need = line->len + n;
  if (need <= line->cap)
    return true;
  size_t cap = line->cap * 2;
  while (cap < need)
    cap *= 2;
  char *grown = line->data == line->inline_bytes ? malloc(cap) : realloc(line->data, cap);
  if (grown == NULL)
    return false;
  if (line->data == line->inline_bytes)
    memcpy(grown, line->inline_bytes, line->len);
  line->data = grown;
  line->cap = cap;
  return true;
}

/* The common case (the piece fits) inlined at every call; a literal's length is a constant. */
static inline void put(sb_log_line *line, const char *s, size_t n) {
  if (n <= line->cap - line->len || reserve(line, n)) {
    memcpy(line->data + line->len, s, n);
    line->len += n;
  }
}

#define PUT_LITERAL(line, text) put((line), (text), sizeof(text) - 1)

void sb_log_line_put(sb_log_line *line, const char *s, size_t n) { put(line, s, n); }

static void put_str(sb_log_line *line, const char *s) { put(line, s, strlen(s)); }

static inline void put_char(sb_log_line *line, char c) {
  if (line->len < line->cap || reserve(line, 1))
    line->data[line->len++] = c;
}

size_t sb_log_int_text(char buf[24], long long v) {
  char digits[24];
  size_t n = 0;
  /* through unsigned, so that LLONG_MIN's magnitude is representable */
  unsigned long long magnitude = v < 0 ? 0ULL - (unsigned long long)v : (unsigned long long)v;
  do {
    digits[n++] = (char)('0' + magnitude % 10);
    magnitude /= 10;
  } while (magnitude != 0);
  size_t len = 0;
  if (v < 0)
    buf[len++] = '-';
  while (n > 0)
    buf[len++] = digits[--n];
  buf[len] = '\0';
  return len;
}

/* Which bytes JSON escaping changes: '"', '\\' and the control characters — and NUL, where a
 * string ends. The rest are copied in runs, found by one load per byte. */
static const bool STOPS_RUN[256] = {
    [0x00] = 1, [0x01] = 1, [0x02] = 1, [0x03] = 1, [0x04] = 1, [0x05] = 1, [0x06] = 1,
    [0x07] = 1, [0x08] = 1, [0x09] = 1, [0x0a] = 1, [0x0b] = 1, [0x0c] = 1, [0x0d] = 1,
    [0x0e] = 1, [0x0f] = 1, [0x10] = 1, [0x11] = 1, [0x12] = 1, [0x13] = 1, [0x14] = 1,
    [0x15] = 1, [0x16] = 1, [0x17] = 1, [0x18] = 1, [0x19] = 1, [0x1a] = 1, [0x1b] = 1,
    [0x1c] = 1, [0x1d] = 1, [0x1e] = 1, [0x1f] = 1, ['"'] = 1,   ['\\'] = 1};

/* JSON string escaping; also used for text mode so a line never breaks. */
static void put_escaped(sb_log_line *line, const char *s) {
  static const char hex[] = "0123456789abcdef";
  const unsigned char *p = (const unsigned char *)s;
  for (;;) {
    const unsigned char *run = p;
    while (!STOPS_RUN[*p])
      p++;
    put(line, (const char *)run, (size_t)(p - run));
    if (*p == '\0')
      return;
    char esc[6] = {'\\', 0};
    size_t n = 2;
    switch (*p) {
    case '"': esc[1] = '"'; break;
    case '\\': esc[1] = '\\'; break;
    case '\n': esc[1] = 'n'; break;
    case '\r': esc[1] = 'r'; break;
    case '\t': esc[1] = 't'; break;
    default: /* \u00XX, lower-case hex as "%04x" wrote it */
      memcpy(esc + 1, "u00", 3);
      esc[4] = hex[*p >> 4];
      esc[5] = hex[*p & 0xf];
      n = 6;
    }
    put(line, esc, n);
    p++;
  }
}

static bool needs_quotes(const char *s) {
  if (*s == '\0')
    return true;
  for (; *s; s++)
    if (*s == ' ' || *s == '"' || *s == '=' || (unsigned char)*s < 0x20)
      return true;
  return false;
}

size_t sb_log_timestamp_text(char out[48], time_t sec, long usec) {
  /* The seconds' text changes once a second: strftime runs then, not per line. Per thread, so
   * that no two threads share the cache. */
  static _Thread_local struct {
    bool valid;
    time_t sec;
    size_t len;
    char text[40];
  } cache;
  if (!cache.valid || cache.sec != sec) {
    struct tm tm;
    cache.len = gmtime_r(&sec, &tm) != NULL
                    ? strftime(cache.text, sizeof cache.text, "%Y-%m-%dT%H:%M:%S", &tm)
                    : 0;
    cache.sec = sec;
    cache.valid = true;
  }
  memcpy(out, cache.text, cache.len);
  int ms = (int)(usec / 1000);
  char *p = out + cache.len;
  *p++ = '.';
  *p++ = (char)('0' + ms / 100 % 10);
  *p++ = (char)('0' + ms / 10 % 10);
  *p++ = (char)('0' + ms % 10);
  *p++ = 'Z';
  *p = '\0';
  return (size_t)(p - out);
}

static void put_timestamp(sb_log_line *line, time_t sec, long usec) {
  char ts[48];
  put(line, ts, sb_log_timestamp_text(ts, sec, usec));
}

static void format_json(sb_log_line *line, const char *level, const char *event,
                        const sb_log_field *fields, size_t n, time_t sec, long usec) {
  PUT_LITERAL(line, "{\"ts\":\"");
  put_timestamp(line, sec, usec);
  PUT_LITERAL(line, "\",\"level\":\"");
  put_escaped(line, level);
  PUT_LITERAL(line, "\",\"event\":\"");
  put_escaped(line, event);
  put_char(line, '"');
  for (size_t i = 0; i < n; i++) {
    PUT_LITERAL(line, ",\"");
    put_escaped(line, fields[i].key);
    PUT_LITERAL(line, "\":");
    if (fields[i].raw) {
      put_str(line, fields[i].value);
    } else {
      put_char(line, '"');
      put_escaped(line, fields[i].value);
      put_char(line, '"');
    }
  }
  PUT_LITERAL(line, "}\n");
}

static void format_text(sb_log_line *line, bool journal, const char *level, const char *event,
                        const sb_log_field *fields, size_t n, time_t sec, long usec) {
  if (!journal) { /* the journal keeps its own timestamps */
    put_timestamp(line, sec, usec);
    put_char(line, ' ');
  }
  put_str(line, level);
  put_char(line, ' ');
  put_escaped(line, event);
  for (size_t i = 0; i < n; i++) {
    put_char(line, ' ');
    put_escaped(line, fields[i].key);
    put_char(line, '=');
    bool quote = !fields[i].raw && needs_quotes(fields[i].value);
    if (quote)
      put_char(line, '"');
    put_escaped(line, fields[i].value);
    if (quote)
      put_char(line, '"');
  }
  put_char(line, '\n');
}

/* The sd-daemon(3) priority prefix journald reads: "<3>" error … "<7>" debug (an unknown
 * level is info's, as everywhere in log.c). */
static const char *journal_prefix(const char *level) {
  static const char *names[] = {"debug", "info", "warn", "error"};
  static const char *prefixes[] = {"<7>", "<6>", "<4>", "<3>"};
  for (int i = 0; i < 4; i++)
    if (strcmp(level, names[i]) == 0)
      return prefixes[i];
  return prefixes[1];
}

void sb_log_line_format(sb_log_line *line, sb_log_line_style style, const char *level,
                        const char *event, const sb_log_field *fields, size_t n, time_t sec,
                        long usec) {
  if (style.journal)
    put_str(line, journal_prefix(level));
  if (style.json)
    format_json(line, level, event, fields, n, sec, usec);
  else
    format_text(line, style.journal, level, event, fields, n, sec, usec);
}
