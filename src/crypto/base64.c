/* Strict RFC 4648 base64; see base64.h for what is refused and why. */
#include "base64.h"

static const char std_chars[64] =
    "ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789+/";
static const char url_chars[64] =
    "ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789-_";

size_t sb_base64_encoded_len(size_t n, sb_b64_alphabet a) {
  if (n / 3 >= SIZE_MAX / 4 - 1)
    return SIZE_MAX;
  size_t full = n / 3 * 4, rest = n % 3;
  if (rest == 0)
    return full;
  return a == SB_B64_STD ? full + 4 : full + rest + 1;
}

size_t sb_base64_encode(char *out, const uint8_t *in, size_t n, sb_b64_alphabet a) {
  const char *chars = a == SB_B64_STD ? std_chars : url_chars;
  char *o = out;
  size_t i = 0;
  for (; n - i >= 3; i += 3) {
    uint32_t v = (uint32_t)in[i] << 16 | (uint32_t)in[i + 1] << 8 | in[i + 2];
    *o++ = chars[v >> 18];
    *o++ = chars[v >> 12 & 63];
    *o++ = chars[v >> 6 & 63];
    *o++ = chars[v & 63];
  }
  if (n - i == 1) {
    uint32_t v = (uint32_t)in[i] << 16;
    *o++ = chars[v >> 18];
    *o++ = chars[v >> 12 & 63];
    if (a == SB_B64_STD) {
      *o++ = '=';
      *o++ = '=';
    }
  } else if (n - i == 2) {
    uint32_t v = (uint32_t)in[i] << 16 | (uint32_t)in[i + 1] << 8;
    *o++ = chars[v >> 18];
    *o++ = chars[v >> 12 & 63];
    *o++ = chars[v >> 6 & 63];
    if (a == SB_B64_STD)
      *o++ = '=';
  }
  return (size_t)(o - out);
}

size_t sb_base64_decoded_max(size_t n) { return n / 4 * 3 + 3; }

/* The 6-bit value of `c` in the alphabet, or -1. */
static int sextet(unsigned char c, sb_b64_alphabet a) {
  if (c >= 'A' && c <= 'Z')
    return c - 'A';
  if (c >= 'a' && c <= 'z')
    return c - 'a' + 26;
  if (c >= '0' && c <= '9')
    return c - '0' + 52;
  if (a == SB_B64_STD)
    return c == '+' ? 62 : c == '/' ? 63 : -1;
  return c == '-' ? 62 : c == '_' ? 63 : -1;
}

bool sb_base64_decode(uint8_t *out, size_t *out_len, const char *in, size_t n,
                      sb_b64_alphabet a, size_t *bad_at, const char **why) {
  const unsigned char *s = (const unsigned char *)in;
  /* Strip the padding first; what remains must be alphabet characters only. */
  size_t pad = 0;
  while (pad < n && pad < 2 && s[n - 1 - pad] == '=')
    pad++;
  if (pad > 0 && n % 4 != 0) {
    *bad_at = n - pad;
    *why = "padding '=' is only valid in a final group of four characters";
    return false;
  }
  if (a == SB_B64_STD && n % 4 != 0) {
    *bad_at = n;
    *why = "length is not a multiple of 4 (standard base64 needs its '=' padding)";
    return false;
  }
  size_t m = n - pad; /* characters that carry data */
  if (m % 4 == 1) {
    *bad_at = n;
    *why = "length is not a length any encoder produces (one character too many or too few)";
    return false;
  }
  uint8_t *o = out;
  size_t i = 0;
  for (; m - i >= 4; i += 4) {
    int v[4];
    for (int k = 0; k < 4; k++) {
      v[k] = sextet(s[i + k], a);
      if (v[k] < 0) {
        *bad_at = i + k;
        *why = s[i + k] == '=' ? "'=' before the end" : "a character outside the alphabet";
        return false;
      }
    }
    uint32_t w = (uint32_t)v[0] << 18 | (uint32_t)v[1] << 12 | (uint32_t)v[2] << 6 | (uint32_t)v[3];
    *o++ = (uint8_t)(w >> 16);
    *o++ = (uint8_t)(w >> 8);
    *o++ = (uint8_t)w;
  }
  size_t rest = m - i; /* 0, 2 or 3 */
  if (rest > 0) {
    int v[3] = {0, 0, 0};
    for (size_t k = 0; k < rest; k++) {
      v[k] = sextet(s[i + k], a);
      if (v[k] < 0) {
        *bad_at = i + k;
        *why = s[i + k] == '=' ? "'=' before the end" : "a character outside the alphabet";
        return false;
      }
    }
    uint32_t w = (uint32_t)v[0] << 18 | (uint32_t)v[1] << 12 | (uint32_t)v[2] << 6;
    /* Bits past the last whole byte must be zero: no encoder sets them, so they are noise. */
    uint32_t unused = rest == 2 ? (w & 0xFFFF) : (w & 0xFF);
    if (unused != 0) {
      *bad_at = i + rest - 1;
      *why = "non-zero bits after the last byte (not a canonical encoding)";
      return false;
    }
    *o++ = (uint8_t)(w >> 16);
    if (rest == 3)
      *o++ = (uint8_t)(w >> 8);
  }
  *out_len = (size_t)(o - out);
  return true;
}
