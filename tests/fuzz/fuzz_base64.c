/* libFuzzer target for src/crypto/base64.c, the decoder the sandbox server runs on /write
 * content from the network. Properties checked on every input:
 *   - decoding never reads or writes out of bounds (ASan) and stays within decoded_max;
 *   - whatever the strict decoder accepts is canonical: encoding it again gives the input back
 *     (for base64url, the input without its optional padding);
 *   - encoding arbitrary bytes and decoding the result gives the bytes back, in both alphabets;
 *   - a refusal always says where (bad_at <= size) and why. */
#include "crypto/base64.h"

#include <stdlib.h>
#include <string.h>

static void check_decode(const uint8_t *data, size_t size, sb_b64_alphabet a) {
  size_t max = sb_base64_decoded_max(size);
  uint8_t *out = malloc(max ? max : 1);
  size_t len = 0, bad_at = 0;
  const char *why = NULL;
  if (sb_base64_decode(out, &len, (const char *)data, size, a, &bad_at, &why)) {
    if (len > max)
      abort();
    size_t expect = size;
    if (a == SB_B64_URL)
      while (expect > 0 && data[expect - 1] == '=')
        expect--;
    char *again = malloc(sb_base64_encoded_len(len, a) + 1);
    size_t n = sb_base64_encode(again, out, len, a);
    if (n != expect || memcmp(again, data, n) != 0)
      abort(); /* accepted a non-canonical encoding */
    free(again);
  } else if (why == NULL || why[0] == '\0' || bad_at > size) {
    abort();
  }
  free(out);
}

static void check_round_trip(const uint8_t *data, size_t size, sb_b64_alphabet a) {
  size_t elen = sb_base64_encoded_len(size, a);
  char *text = malloc(elen + 1);
  size_t n = sb_base64_encode(text, data, size, a);
  if (n != elen)
    abort();
  uint8_t *back = malloc(sb_base64_decoded_max(n) + 1);
  size_t len = 0, bad_at = 0;
  const char *why = NULL;
  if (!sb_base64_decode(back, &len, text, n, a, &bad_at, &why) || len != size ||
      (size > 0 && memcmp(back, data, size) != 0))
    abort();
  free(back);
  free(text);
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
  check_decode(data, size, SB_B64_STD);
  check_decode(data, size, SB_B64_URL);
  check_round_trip(data, size, SB_B64_STD);
  check_round_trip(data, size, SB_B64_URL);
  return 0;
}
