/* Unit tests for sb_ct_secret (crypto/ct.h): the kept secret equals itself and nothing else —
 * a difference at the first and the last byte, every prefix, every extension (the zero padding
 * must not stand in for bytes: a candidate of the secret plus NULs is not the secret), a
 * candidate longer than the cap, binary bytes, an empty secret; a second set replaces the
 * first; a cleared secret equals nothing. */
#include "crypto/ct.h"

#include <stdio.h>
#include <string.h>

#include "check.h"

enum { CAP = 64 };

int main(void) {
  const char token[] = "sb-0123456789-abcdefghijklmnopqrstuvwx";
  size_t n = sizeof token - 1;
  sb_ct_secret s = {0};
  CHECK(sb_ct_secret_equal(&s, token, n) == 0, "an unset secret equals nothing");
  CHECK(sb_ct_secret_set(&s, token, n, CAP) == 0, "set");

  char copy[CAP + 8];
  memset(copy, 0, sizeof copy);
  memcpy(copy, token, n);
  CHECK(sb_ct_secret_equal(&s, copy, n) == 1, "the same bytes");
  copy[0] ^= 1;
  CHECK(sb_ct_secret_equal(&s, copy, n) == 0, "first byte differs");
  copy[0] ^= 1;
  copy[n - 1] ^= 0x80;
  CHECK(sb_ct_secret_equal(&s, copy, n) == 0, "last byte differs");
  copy[n - 1] ^= 0x80;

  for (size_t k = 0; k < n; k++)
    CHECK(sb_ct_secret_equal(&s, token, k) == 0, "a %zu-byte prefix is not the secret", k);
  /* copy holds the token then NULs: each longer candidate matches the padding byte for byte */
  for (size_t k = n + 1; k <= CAP; k++)
    CHECK(sb_ct_secret_equal(&s, copy, k) == 0, "the secret and %zu NULs is not the secret", k - n);
  CHECK(sb_ct_secret_equal(&s, copy, CAP + 8) == 0, "a candidate over the cap");

  const unsigned char bin[] = {0, 1, 2, 0, 255, 0};
  unsigned char other[sizeof bin];
  memcpy(other, bin, sizeof bin);
  CHECK(sb_ct_secret_set(&s, bin, sizeof bin, CAP) == 0, "set again (binary)");
  CHECK(sb_ct_secret_equal(&s, token, n) == 0, "the first secret no longer passes");
  CHECK(sb_ct_secret_equal(&s, other, sizeof other) == 1, "binary equal");
  other[4] = 254;
  CHECK(sb_ct_secret_equal(&s, other, sizeof other) == 0, "binary differs after a NUL");

  /* a secret longer than the cap is kept whole (the cap is raised to it) */
  char long_secret[3 * CAP];
  memset(long_secret, 'x', sizeof long_secret);
  CHECK(sb_ct_secret_set(&s, long_secret, sizeof long_secret, CAP) == 0, "set a long secret");
  CHECK(sb_ct_secret_equal(&s, long_secret, sizeof long_secret) == 1, "the long secret");
  CHECK(sb_ct_secret_equal(&s, long_secret, CAP) == 0, "its first cap bytes");

  CHECK(sb_ct_secret_set(&s, "", 0, CAP) == 0, "set an empty secret");
  CHECK(sb_ct_secret_equal(&s, "", 0) == 0, "an empty secret equals nothing, not even empty");

  CHECK(sb_ct_secret_set(&s, token, n, CAP) == 0, "set");
  sb_ct_secret_clear(&s);
  CHECK(s.padded == NULL && s.len == 0, "cleared");
  CHECK(sb_ct_secret_equal(&s, token, n) == 0, "a cleared secret equals nothing");

  if (failures != 0) {
    fprintf(stderr, "%d check(s) failed\n", failures);
    return 1;
  }
  puts("ct_secret: ok");
  return 0;
}
