/* libFuzzer target: the engine's decoder of the walls spawner's reply (src/walls/request.c),
 * bytes that come from inside a sandbox instance. A whole reply names exactly one of an exit
 * code (0-255) or a signal (1-64); anything else is refused, never misread. */
#include "walls/request.h"

#include <stdlib.h>

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);
int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
  int code = -1, sig = -1;
  int rc = walls_reply_decode(data, size, &code, &sig);
  if (rc == 1 && !((sig == 0 && code >= 0 && code <= 255) ||
                   (code == 0 && sig >= 1 && sig <= 64)))
    abort();
  if (rc == 0 && size >= WALLS_REPLY_LEN)
    abort();
  if (rc != 1 && (code != 0 || sig != 0))
    abort();
  return 0;
}
