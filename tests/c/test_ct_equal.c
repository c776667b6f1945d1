/* Unit tests for sb_ct_equal: equal inputs, a difference at the first and the last byte,
 * every prefix (different lengths compare false), empty inputs, binary data with NULs. */
#include "crypto/ct.h"

#include <stdio.h>
#include <string.h>

#include "check.h"

int main(void) {
  const char token[] = "xoxb-0123456789-abcdefghijklmnopqrstuvwx";
  size_t n = sizeof token - 1;
  char copy[sizeof token];
  memcpy(copy, token, sizeof token);

  CHECK(sb_ct_equal(token, n, copy, n) == 1, "equal tokens");
  CHECK(sb_ct_equal("", 0, "", 0) == 1, "two empty strings");
  CHECK(sb_ct_equal("", 0, "a", 1) == 0, "empty vs one byte");
  CHECK(sb_ct_equal("a", 1, "", 0) == 0, "one byte vs empty");

  copy[0] ^= 1;
  CHECK(sb_ct_equal(token, n, copy, n) == 0, "first byte differs");
  copy[0] ^= 1;
  copy[n - 1] ^= 0x80;
  CHECK(sb_ct_equal(token, n, copy, n) == 0, "last byte differs");
  copy[n - 1] ^= 0x80;

  for (size_t k = 0; k < n; k++) {
    CHECK(sb_ct_equal(token, n, token, k) == 0, "a %zu-byte prefix is not equal", k);
    CHECK(sb_ct_equal(token, k, token, n) == 0, "not equal to a %zu-byte prefix", k);
  }
  /* Same bytes plus trailing NULs: a length difference only. */
  const char padded[] = "abc\0\0";
  CHECK(sb_ct_equal("abc", 3, padded, 5) == 0, "trailing NULs make a different string");

  const unsigned char bin_a[] = {0, 1, 2, 0, 255, 0};
  const unsigned char bin_b[] = {0, 1, 2, 0, 255, 0};
  const unsigned char bin_c[] = {0, 1, 2, 0, 254, 0};
  CHECK(sb_ct_equal(bin_a, sizeof bin_a, bin_b, sizeof bin_b) == 1, "binary equal");
  CHECK(sb_ct_equal(bin_a, sizeof bin_a, bin_c, sizeof bin_c) == 0, "binary differs after NUL");

  if (failures != 0) {
    fprintf(stderr, "%d check(s) failed\n", failures);
    return 1;
  }
  puts("ct_equal: ok");
  return 0;
}
