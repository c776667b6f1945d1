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

/* ---- the block writers behind sb_json_text_into (issue 43: the 1 MB row) -----------------------
 * text_part's loop, into dst, still branched once per byte it stops at and once more per clean
 * stretch (13,513 newlines in the 1 MB bench's megabyte of 74-byte lines). These write each
 * block of the input to dst whole (one unaligned store, room given by the 6-bytes-a-byte
 * contract) and move dst on by the clean bytes before the block's first byte to look at: a clean
 * block is one load and one store, an ASCII escape one 8-byte store from a table. Bytes >= 0x80
 * go through sb_utf8_sequence and utf8_prefix exactly as in text_part, so every writer writes
 * what text_part writes (fuzz_json_text and tests/c/test_json_text.c hold them equal). */

/* Each ASCII byte's text in a JSON string: len 0 for a byte that stands as itself. Eight bytes an
 * entry, so an escape is one 8-byte copy (the bytes past len are overwritten next). */
typedef struct {
  char text[7];
  unsigned char len;
} ascii_text;

#define HEX_DIGIT(d) ((char)((d) < 10 ? '0' + (d) : 'a' + (d)-10))
#define AS_U(c) [c] = {{'\\', 'u', '0', '0', HEX_DIGIT((c) >> 4), HEX_DIGIT((c)&15)}, 6}
#define AS_2(c, e) [c] = {{'\\', e}, 2}
static const ascii_text ascii_texts[128] = {
    AS_U(0x00), AS_U(0x01), AS_U(0x02), AS_U(0x03), AS_U(0x04), AS_U(0x05), AS_U(0x06),
    AS_U(0x07), AS_2('\b', 'b'), AS_2('\t', 't'), AS_2('\n', 'n'), AS_U(0x0B), AS_2('\f', 'f'),
    AS_2('\r', 'r'), AS_U(0x0E), AS_U(0x0F), AS_U(0x10), AS_U(0x11), AS_U(0x12), AS_U(0x13),
    AS_U(0x14), AS_U(0x15), AS_U(0x16), AS_U(0x17), AS_U(0x18), AS_U(0x19), AS_U(0x1A),
    AS_U(0x1B), AS_U(0x1C), AS_U(0x1D), AS_U(0x1E), AS_U(0x1F), AS_2('"', '"'),
    AS_2('\\', '\\'), AS_U(0x7F)};
#undef AS_2
#undef AS_U
#undef HEX_DIGIT

/* The state of one sb_json_text_into call. */
typedef struct {
  const unsigned char *s;
  size_t n; /* lowered to the start of a sequence cut by the piece's end */
  bool final;
  bool *valid;
  char *dst;
  size_t w; /* bytes written */
} into_state;

/* The byte at s[i], one a block's test flagged or one of the tail: its text written; returns the
 * input bytes it took, 0 when it starts a UTF-8 sequence cut by the piece's end (st->n is then
 * lowered to i: the next call's). wide: dst has 8 bytes of room at st->w (an escape copied
 * whole). */
static inline __attribute__((always_inline)) size_t write_byte(into_state *st, size_t i,
                                                               bool wide) {
  static const char replacement[] = "\xEF\xBF\xBD"; /* U+FFFD */
  unsigned char c = st->s[i];
  if (c < 0x80) {
    const ascii_text *t = &ascii_texts[c];
    if (t->len == 0) {
      st->dst[st->w++] = (char)c;
    } else if (wide) {
      memcpy(st->dst + st->w, t, 8);
      st->w += t->len;
    } else {
      for (size_t k = 0; k < t->len; k++)
        st->dst[st->w + k] = t->text[k];
      st->w += t->len;
    }
    return 1;
  }
  size_t len = sb_utf8_sequence(st->s + i, st->n - i);
  if (len > 0) {
    for (size_t k = 0; k < len; k++)
      st->dst[st->w + k] = (char)st->s[i + k];
    st->w += len;
    return len;
  }
  if (!st->final && st->n - i < 4 && utf8_prefix(st->s + i, st->n - i)) {
    st->n = i;
    return 0;
  }
  for (size_t k = 0; k < 3; k++)
    st->dst[st->w + k] = replacement[k];
  st->w += 3;
  *st->valid = false;
  return 1;
}

/* What no block took (fewer bytes than a block), one byte at a time. */
static inline __attribute__((always_inline)) void write_tail(into_state *st, size_t i) {
  while (i < st->n) {
    size_t took = write_byte(st, i, false);
    if (took == 0)
      break;
    i += took;
  }
}

/* After a block stored whole at st->w with its first byte to look at `at` bytes in: keep the
 * clean bytes before it, write that byte's text; returns the input bytes taken (0: a sequence cut
 * by the piece's end). An ASCII escape is one 8-byte copy: the block began at most 31 bytes
 * before it with at least 16 input bytes, so st->w was at most 6 per byte taken and the room
 * left is at least 96 >= 31 + 8. A byte >= 0x80 takes the run of such bytes after it too, one
 * sequence at a time (UTF-8 text: −20 % against a block reloaded for each); an escape does not
 * look further (a newline a line: that look cost the 1 MB bench's lines ~7 %). */
static inline __attribute__((always_inline)) size_t after_block(into_state *st, size_t i,
                                                                unsigned at) {
  st->w += at;
  i += at;
  size_t start = i;
  if (st->s[i] < 0x80)
    return at + write_byte(st, i, true);
  do {
    size_t took = write_byte(st, i, false);
    if (took == 0)
      return 0;
    i += took;
  } while (i < st->n && st->s[i] >= 0x80);
  return at + (i - start);
}

#if defined(__SSE2__)
/* 16 bytes a block; the same test as skip_clean's. Returns where it stopped (a tail to do). */
static inline __attribute__((always_inline)) size_t blocks_16(into_state *st, size_t i) {
  const __m128i space = _mm_set1_epi8(0x20), quote = _mm_set1_epi8('"');
  const __m128i backslash = _mm_set1_epi8('\\'), del = _mm_set1_epi8(0x7F);
  while (i + 16 <= st->n) {
    __m128i v = _mm_loadu_si128((const __m128i *)(st->s + i));
    __m128i look = _mm_or_si128(_mm_or_si128(_mm_cmplt_epi8(v, space), _mm_cmpeq_epi8(v, quote)),
                                _mm_or_si128(_mm_cmpeq_epi8(v, backslash), _mm_cmpeq_epi8(v, del)));
    _mm_storeu_si128((__m128i *)(st->dst + st->w), v);
    unsigned mask = (unsigned)_mm_movemask_epi8(look);
    if (mask == 0) {
      i += 16;
      st->w += 16;
      continue;
    }
    size_t took = after_block(st, i, (unsigned)__builtin_ctz(mask));
    if (took == 0)
      return st->n;
    i += took;
  }
  return i;
}

static size_t into_sse2(into_state *st) {
  write_tail(st, blocks_16(st, 0));
  return st->n;
}

#if defined(__x86_64__) || defined(__i386__)
#include <immintrin.h>
#define SB_JSON_TEXT_HAVE_AVX2 1

/* 32 bytes a block where the CPU has AVX2 (chosen at run time: the build targets baseline
 * x86-64), then one 16-byte block, then the tail. */
__attribute__((target("avx2"))) static size_t into_avx2(into_state *st) {
  const __m256i space = _mm256_set1_epi8(0x20), quote = _mm256_set1_epi8('"');
  const __m256i backslash = _mm256_set1_epi8('\\'), del = _mm256_set1_epi8(0x7F);
  size_t i = 0;
  while (i + 32 <= st->n) {
    __m256i v = _mm256_loadu_si256((const __m256i *)(st->s + i));
    /* signed: a byte >= 0x80 is negative, so below 0x20 too */
    __m256i look = _mm256_or_si256(
        _mm256_or_si256(_mm256_cmpgt_epi8(space, v), _mm256_cmpeq_epi8(v, quote)),
        _mm256_or_si256(_mm256_cmpeq_epi8(v, backslash), _mm256_cmpeq_epi8(v, del)));
    _mm256_storeu_si256((__m256i *)(st->dst + st->w), v);
    unsigned mask = (unsigned)_mm256_movemask_epi8(look);
    if (mask == 0) {
      i += 32;
      st->w += 32;
      continue;
    }
    size_t took = after_block(st, i, (unsigned)__builtin_ctz(mask));
    if (took == 0)
      return st->n;
    i += took;
  }
  write_tail(st, blocks_16(st, i));
  return st->n;
}
#endif
#endif

/* text_part's own loop into dst: the reference the block writers are held to, and the writer
 * where there is no SSE2. */
static size_t into_bytes(into_state *st) {
  text_out o = {NULL, NULL, st->dst, 0};
  size_t taken = text_part((const char *)st->s, st->n, st->final, st->valid, &o);
  st->w = o.len;
  return taken;
}

bool sb_json_text_writer_available(sb_json_text_writer writer) {
  switch (writer) {
  case SB_JSON_TEXT_BYTES:
    return true;
  case SB_JSON_TEXT_SSE2:
#if defined(__SSE2__)
    return true;
#else
    return false;
#endif
  case SB_JSON_TEXT_AVX2:
#if defined(SB_JSON_TEXT_HAVE_AVX2)
    return __builtin_cpu_supports("avx2");
#else
    return false;
#endif
  }
  return false;
}

size_t sb_json_text_into_with(sb_json_text_writer writer, char *dst, const char *str, size_t n,
                              bool final, bool *valid, size_t *written) {
  into_state st = {(const unsigned char *)str, n, final, valid, dst, 0};
  size_t taken;
  switch (writer) {
#if defined(SB_JSON_TEXT_HAVE_AVX2)
  case SB_JSON_TEXT_AVX2:
    taken = into_avx2(&st);
    break;
#endif
#if defined(__SSE2__)
  case SB_JSON_TEXT_SSE2:
    taken = into_sse2(&st);
    break;
#endif
  default:
    taken = into_bytes(&st);
    break;
  }
  *written = st.w;
  return taken;
}

size_t sb_json_text_into(char *dst, const char *str, size_t n, bool final, bool *valid,
                         size_t *written) {
#if defined(SB_JSON_TEXT_HAVE_AVX2)
  if (__builtin_cpu_supports("avx2"))
    return sb_json_text_into_with(SB_JSON_TEXT_AVX2, dst, str, n, final, valid, written);
#endif
#if defined(__SSE2__)
  return sb_json_text_into_with(SB_JSON_TEXT_SSE2, dst, str, n, final, valid, written);
#else
  return sb_json_text_into_with(SB_JSON_TEXT_BYTES, dst, str, n, final, valid, written);
#endif
}

size_t sb_json_text_part(const char *str, size_t n, bool final, bool *valid, sb_json_emit emit,
                         void *ctx) {
  text_out o = {emit, ctx, NULL, 0};
  return text_part(str, n, final, valid, &o);
}

bool sb_json_string(const char *str, size_t n, sb_json_emit emit, void *ctx) {
  bool valid = true;
  emit(ctx, "\"", 1);
  sb_json_text_part(str, n, true, &valid, emit, ctx);
  emit(ctx, "\"", 1);
  return valid;
}
