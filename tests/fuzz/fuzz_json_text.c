/* libFuzzer target: src/json/json_text.c, the one-pass JSON string writer that carries command
 * output (arbitrary bytes) into sandboxd's answers. For any input the output must be a JSON
 * string literal that is valid UTF-8 with no raw control bytes (DEL included) and no unescaped
 * quote, the valid flag must agree with a byte-by-byte reference check, and valid input must
 * come back unchanged once the escapes are undone. The same input fed in pieces
 * (sb_json_text_part, the exec lane's stream of a long stdout: pieces cut anywhere, a UTF-8
 * sequence among them) must write exactly the same literal and the same flag, and so must the
 * same pieces written straight into a buffer (sb_json_text_into, the stream's encoder) by each
 * of its writers (the byte loop, 16- and 32-byte blocks: sb_json_text_into_with). */
#include "json/json_text.h"

#include <stdbool.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

typedef struct {
  char *buf;
  size_t len, cap;
} out_buf;

static void emit(void *ctx, const char *bytes, size_t len) {
  out_buf *o = ctx;
  if (o->len + len > o->cap) {
    o->cap = (o->len + len) * 2 + 16;
    o->buf = realloc(o->buf, o->cap);
    if (o->buf == NULL)
      abort();
  }
  memcpy(o->buf + o->len, bytes, len);
  o->len += len;
}

/* Reference UTF-8 check by code point (RFC 3629), independent of sb_utf8_sequence. */
static int reference_valid(const uint8_t *s, size_t n) {
  size_t i = 0;
  while (i < n) {
    uint32_t c = s[i], cp;
    size_t len = c < 0x80 ? 1 : (c >> 5) == 6 ? 2 : (c >> 4) == 14 ? 3 : (c >> 3) == 30 ? 4 : 0;
    if (len == 0 || i + len > n)
      return 0;
    cp = len == 1 ? c : len == 2 ? c & 0x1F : len == 3 ? c & 0x0F : c & 0x07;
    for (size_t k = 1; k < len; k++) {
      if ((s[i + k] & 0xC0) != 0x80)
        return 0;
      cp = (cp << 6) | (s[i + k] & 0x3F);
    }
    static const uint32_t min[5] = {0, 0, 0x80, 0x800, 0x10000};
    if (cp < min[len] || cp > 0x10FFFF || (cp >= 0xD800 && cp <= 0xDFFF))
      return 0;
    i += len;
  }
  return 1;
}

/* The pieces written straight into a buffer by sb_json_text_into (writer -1) or one named writer
 * (each block width, stores of whole blocks into the room given, escapes at block edges): the
 * literal of `whole`, and never more than SB_JSON_TEXT_MAX_GROWTH a byte. The pieces here are
 * 1..7 bytes (the tail) or, from the input's second byte on, up to 200 (the blocks). The buffer
 * is exactly the room the contract asks, so a store past it is ASan's. */
static void check_direct(const uint8_t *data, size_t size, int writer, bool valid,
                         const out_buf *whole) {
  char *direct = malloc(SB_JSON_TEXT_MAX_GROWTH * size + 2);
  if (direct == NULL)
    abort();
  size_t written = 0, at = 0, end = 0;
  size_t step = size > 0 ? (size_t)(data[0] % 7) + 1 : 1;
  bool long_pieces = size > 1 && (data[1] & 1);
  bool direct_valid = true;
  direct[written++] = '"';
  while (at < size) {
    size_t want = long_pieces ? step * 29 : step;
    end = end + want < size ? end + want : size;
    size_t w, k;
    if (writer < 0)
      k = sb_json_text_into(direct + written, (const char *)data + at, end - at, end == size,
                            &direct_valid, &w);
    else
      k = sb_json_text_into_with((sb_json_text_writer)writer, direct + written,
                                 (const char *)data + at, end - at, end == size, &direct_valid, &w);
    if (w > SB_JSON_TEXT_MAX_GROWTH * k)
      abort();
    written += w;
    at += k;
    step = step % 7 + 1;
  }
  direct[written++] = '"';
  if (direct_valid != valid || written != whole->len || memcmp(direct, whole->buf, whole->len) != 0)
    abort();
  free(direct);
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
  out_buf o = {0};
  int valid = sb_json_string((const char *)data, size, emit, &o);
  if (valid != reference_valid(data, size))
    abort();
  if (o.len < 2 || o.buf[0] != '"' || o.buf[o.len - 1] != '"')
    abort();
  const uint8_t *s = (const uint8_t *)o.buf;
  if (!reference_valid(s, o.len))
    abort();
  /* inside the quotes: no raw control byte, every quote escaped; undo the escapes */
  uint8_t *back = malloc(o.len + 1);
  size_t m = 0;
  for (size_t i = 1; i + 1 < o.len; i++) {
    if (s[i] < 0x20 || s[i] == '"' || s[i] == 0x7F) /* DEL goes as \u007f */
      abort();
    if (s[i] != '\\') {
      back[m++] = s[i];
      continue;
    }
    char e = (char)s[++i];
    if (i + 1 >= o.len)
      abort(); /* an escape cut by the closing quote */
    switch (e) {
    case '"': back[m++] = '"'; break;
    case '\\': back[m++] = '\\'; break;
    case 'n': back[m++] = '\n'; break;
    case 'r': back[m++] = '\r'; break;
    case 't': back[m++] = '\t'; break;
    case 'b': back[m++] = '\b'; break;
    case 'f': back[m++] = '\f'; break;
    case 'u': {
      if (i + 4 >= o.len)
        abort();
      char hex[5] = {(char)s[i + 1], (char)s[i + 2], (char)s[i + 3], (char)s[i + 4], 0};
      back[m++] = (uint8_t)strtoul(hex, NULL, 16);
      i += 4;
      break;
    }
    default:
      abort();
    }
  }
  if (valid && (m != size || memcmp(back, data, size) != 0))
    abort();
  free(back);
  /* in pieces of 1..7 bytes, the cut points chosen by the input's first byte */
  out_buf p = {0};
  bool pieces_valid = true;
  size_t at = 0, end = 0, step = size > 0 ? (size_t)(data[0] % 7) + 1 : 1;
  emit(&p, "\"", 1);
  while (at < size) {
    end = end + step < size ? end + step : size;
    at += sb_json_text_part((const char *)data + at, end - at, end == size, &pieces_valid, emit, &p);
    step = step % 7 + 1;
  }
  emit(&p, "\"", 1);
  if (pieces_valid != (bool)valid || p.len != o.len || memcmp(p.buf, o.buf, o.len) != 0)
    abort();
  /* the same pieces written straight into a buffer (sb_json_text_into): the same bytes, and
   * never more than SB_JSON_TEXT_MAX_GROWTH a byte */
  for (int writer = -1; writer <= SB_JSON_TEXT_AVX2; writer++)
    if (writer < 0 || sb_json_text_writer_available((sb_json_text_writer)writer))
      check_direct(data, size, writer, (bool)valid, &o);
  free(p.buf);
  free(o.buf);
  return 0;
}
