/* See json_text.h. */
#include "json_text.h"

#include <stdio.h>

size_t sb_utf8_sequence(const unsigned char *s, size_t n) {
  unsigned char c = s[0];
  if (c < 0x80)
    return 1;
  size_t len;
  unsigned char lo = 0x80, hi = 0xBF; /* the second byte's range, narrowed where RFC 3629 says */
  if (c >= 0xC2 && c <= 0xDF) {
    len = 2;
  } else if (c >= 0xE0 && c <= 0xEF) {
    len = 3;
    if (c == 0xE0)
      lo = 0xA0; /* overlong */
    else if (c == 0xED)
      hi = 0x9F; /* surrogates */
  } else if (c >= 0xF0 && c <= 0xF4) {
    len = 4;
    if (c == 0xF0)
      lo = 0x90; /* overlong */
    else if (c == 0xF4)
      hi = 0x8F; /* past U+10FFFF */
  } else {
    return 0;
  }
  if (n < len || s[1] < lo || s[1] > hi)
    return 0;
  for (size_t i = 2; i < len; i++)
    if (s[i] < 0x80 || s[i] > 0xBF)
      return 0;
  return len;
}

/* The escape of an ASCII byte that cannot stand in a JSON string as itself, or NULL. */
static const char *escape_of(unsigned char c, char buf[8]) {
  switch (c) {
  case '"': return "\\\"";
  case '\\': return "\\\\";
  case '\n': return "\\n";
  case '\r': return "\\r";
  case '\t': return "\\t";
  case '\b': return "\\b";
  case '\f': return "\\f";
  default:
    if (c < 0x20 || c == 0x7F) {
      snprintf(buf, 8, "\\u%04x", c);
      return buf;
    }
    return NULL;
  }
}

bool sb_json_string(const char *str, size_t n, sb_json_emit emit, void *ctx) {
  static const char replacement[] = "\xEF\xBF\xBD"; /* U+FFFD */
  const unsigned char *s = (const unsigned char *)str;
  bool valid = true;
  size_t run = 0; /* start of the clean run not yet emitted */
  size_t i = 0;
  char buf[8];
  emit(ctx, "\"", 1);
  while (i < n) {
    unsigned char c = s[i];
    if (c >= 0x20 && c < 0x7F && c != '"' && c != '\\') {
      i++;
      continue;
    }
    if (c >= 0x80) {
      size_t len = sb_utf8_sequence(s + i, n - i);
      if (len > 0) {
        i += len;
        continue;
      }
      emit(ctx, str + run, i - run);
      emit(ctx, replacement, 3);
      valid = false;
      run = ++i;
      continue;
    }
    const char *e = escape_of(c, buf);
    emit(ctx, str + run, i - run);
    emit(ctx, e, __builtin_strlen(e));
    run = ++i;
  }
  emit(ctx, str + run, n - run);
  emit(ctx, "\"", 1);
  return valid;
}
