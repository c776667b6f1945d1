/* See json_text.h. */
#include "json_text.h"

#include <stdint.h>
#include <stdio.h>
#include <string.h>

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
static inline __attribute__((always_inline)) const char *escape_of(unsigned char c, char buf[8]) {
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

/* Clean bytes many at a time (issue 43): command output is mostly printable ASCII, and the byte
 * loop below, four tests a byte, cost 1.6 ms per megabyte. skip_clean returns the first index
 * from i on whose byte may need a look of its own — a control byte (< 0x20), '"', '\\', DEL
 * or a byte >= 0x80 — stepping over whole blocks with none; the byte loop decides every byte it
 * is handed, so the output is the byte loop's whatever the block test says. */
#if defined(__SSE2__)
#include <emmintrin.h>

static inline __attribute__((always_inline)) size_t skip_clean(const unsigned char *s, size_t i,
                                                              size_t n) {
  const __m128i space = _mm_set1_epi8(0x20), quote = _mm_set1_epi8('"');
  const __m128i backslash = _mm_set1_epi8('\\'), del = _mm_set1_epi8(0x7F);
  while (i + 16 <= n) {
    __m128i v = _mm_loadu_si128((const __m128i *)(s + i));
    /* signed: a byte >= 0x80 is negative, so below 0x20 too */
    __m128i look = _mm_or_si128(_mm_or_si128(_mm_cmplt_epi8(v, space), _mm_cmpeq_epi8(v, quote)),
                                _mm_or_si128(_mm_cmpeq_epi8(v, backslash), _mm_cmpeq_epi8(v, del)));
    unsigned mask = (unsigned)_mm_movemask_epi8(look);
    if (mask != 0)
      return i + (size_t)__builtin_ctz(mask);
    i += 16;
  }
  return i;
}
#else
/* Eight bytes a word: the "some byte is below k" idiom, (x - k·0x01…) & ~x & 0x80… (exact as a
 * yes/no for k <= 0x80), on w for k = 0x20 and on w XOR the byte sought for k = 1. */
static inline __attribute__((always_inline)) size_t skip_clean(const unsigned char *s, size_t i,
                                                              size_t n) {
  const uint64_t ones = 0x0101010101010101ULL, highs = 0x8080808080808080ULL;
  while (i + 8 <= n) {
    uint64_t w;
    memcpy(&w, s + i, 8); /* an unaligned load */
    uint64_t quote = w ^ (ones * '"'), backslash = w ^ (ones * '\\'), del = w ^ (ones * 0x7F);
    uint64_t hits = ((w - ones * 0x20) & ~w) | ((quote - ones) & ~quote) |
                    ((backslash - ones) & ~backslash) | ((del - ones) & ~del) | w;
    if ((hits & highs) != 0)
      break;
    i += 8;
  }
  return i;
}
#endif

/* Whether s[0..n) (n < the sequence's length) begins some valid UTF-8 sequence: the bytes still
 * to come could complete it. */
static bool utf8_prefix(const unsigned char *s, size_t n) {
  if (s[0] < 0xC2 || s[0] > 0xF4)
    return false;
  unsigned char whole[4] = {s[0], 0, 0x80, 0x80};
  if (n < 2) { /* the lead alone: the second byte's narrowed range always holds one */
    whole[1] = s[0] == 0xE0 ? 0xA0 : s[0] == 0xF0 ? 0x90 : 0x80;
  } else {
    for (size_t i = 1; i < n && i < 4; i++)
      whole[i] = s[i];
  }
  size_t len = sb_utf8_sequence(whole, 4);
  return len > n;
}

/* Where the literal goes: through emit (dst NULL), or straight into dst, whose room for the worst
 * case the caller gave (SB_JSON_TEXT_MAX_GROWTH bytes a byte). One loop for both, inlined into
 * each entry, so the emit path keeps its calls and the direct path has none. */
typedef struct {
  sb_json_emit emit;
  void *ctx;
  char *dst;
  size_t len;
} text_out;

static inline __attribute__((always_inline)) void out(text_out *o, const char *p, size_t n) {
  if (o->dst != NULL) {
    memcpy(o->dst + o->len, p, n);
    o->len += n;
  } else {
    o->emit(o->ctx, p, n);
  }
}

/* An escape or U+FFFD (2-6 bytes): into dst byte by byte, not through a memcpy call. */
static inline __attribute__((always_inline)) void out_short(text_out *o, const char *p, size_t n) {
  if (o->dst == NULL) {
    o->emit(o->ctx, p, n);
    return;
  }
  for (size_t k = 0; k < n; k++)
    o->dst[o->len + k] = p[k];
  o->len += n;
}

static inline __attribute__((always_inline)) size_t text_part(const char *str, size_t n, bool final,
                                                              bool *valid, text_out *o) {
  static const char replacement[] = "\xEF\xBF\xBD"; /* U+FFFD */
  const unsigned char *s = (const unsigned char *)str;
  size_t run = 0; /* start of the clean run not yet written */
  size_t i = 0;
  char buf[8];
  while (i < n) {
    i = skip_clean(s, i, n);
    if (i >= n)
      break;
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
      if (!final && n - i < 4 && utf8_prefix(s + i, n - i)) {
        n = i; /* a sequence cut by the chunk's end: decided with the bytes that follow */
        break;
      }
      out(o, str + run, i - run);
      out_short(o, replacement, 3);
      *valid = false;
      run = ++i;
      continue;
    }
    const char *e = escape_of(c, buf);
    out(o, str + run, i - run);
    out_short(o, e, __builtin_strlen(e));
    run = ++i;
  }
  out(o, str + run, n - run);
  return n;
}

size_t sb_json_text_part(const char *str, size_t n, bool final, bool *valid, sb_json_emit emit,
                         void *ctx) {
  text_out o = {emit, ctx, NULL, 0};
  return text_part(str, n, final, valid, &o);
}

size_t sb_json_text_into(char *dst, const char *str, size_t n, bool final, bool *valid,
                         size_t *written) {
  text_out o = {NULL, NULL, dst, 0};
  size_t taken = text_part(str, n, final, valid, &o);
  *written = o.len;
  return taken;
}

bool sb_json_string(const char *str, size_t n, sb_json_emit emit, void *ctx) {
  bool valid = true;
  emit(ctx, "\"", 1);
  sb_json_text_part(str, n, true, &valid, emit, ctx);
  emit(ctx, "\"", 1);
  return valid;
}
