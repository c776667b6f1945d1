/* Base64 (RFC 4648) without Lua or OpenSSL, so the unit tests and the fuzz target drive the
 * exact code the engine runs. Decoding is strict: the standard alphabet requires its padding,
 * the URL alphabet is unpadded (correct padding is also accepted), and anything else — a
 * character outside the alphabet, whitespace, a misplaced '=', a length no encoder produces,
 * non-zero bits in the final group — is refused rather than skipped. */
#ifndef SB_BASE64_H
#define SB_BASE64_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

typedef enum { SB_B64_STD, SB_B64_URL } sb_b64_alphabet;

/* Bytes sb_base64_encode() writes for `n` input bytes (no terminator), or SIZE_MAX when the
 * size would overflow. */
size_t sb_base64_encoded_len(size_t n, sb_b64_alphabet a);

/* Writes the encoding of in[0..n) to `out` (caller-owned, sb_base64_encoded_len() bytes);
 * returns the number of bytes written. */
size_t sb_base64_encode(char *out, const uint8_t *in, size_t n, sb_b64_alphabet a);

/* Upper bound of the decoded size of `n` text bytes (the buffer to hand to decode). */
size_t sb_base64_decoded_max(size_t n);

/* Decodes in[0..n) into `out` (caller-owned, sb_base64_decoded_max(n) bytes). Returns true and
 * sets *out_len, or false with *bad_at = the offset of the first offending byte (n when the
 * length is the problem) and *why = a static explanation. */
bool sb_base64_decode(uint8_t *out, size_t *out_len, const char *in, size_t n,
                      sb_b64_alphabet a, size_t *bad_at, const char **why);

#endif
