/* libFuzzer target: the engine's decoder of the walls spawner's reply (src/walls/request.c),
 * bytes that come from inside a sandbox instance. A whole reply names its command's id and
 * exactly one of an exit code (0-255) or a signal (1-64); anything else is refused, never
 * misread; what decodes encodes back to the same bytes. */
#include "walls/request.h"

#include <stdlib.h>
#include <string.h>

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);
int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
  int code = -1, sig = -1;
  uint32_t id = 0;
  int rc = walls_reply_decode(data, size, &id, &code, &sig);
  if (rc == 1 && !((sig == 0 && code >= 0 && code <= 255) ||
                   (code == 0 && sig >= 1 && sig <= 64)))
    abort();
  if (rc == 1) {
    unsigned char again[WALLS_REPLY_LEN];
    walls_reply_encode(again, id, sig != 0 ? sig : code << 8);
    uint32_t id2 = 0;
    int code2, sig2;
    if (walls_reply_decode(again, sizeof again, &id2, &code2, &sig2) != 1 || id2 != id ||
        code2 != code || sig2 != sig)
      abort();
  }
  if (rc == 0 && size >= WALLS_REPLY_LEN)
    abort();
  if (rc != 1 && (code != 0 || sig != 0))
    abort();
  return 0;
}
