/* libFuzzer target: the walls spawner's request parser (src/walls/request.c), which reads
 * bytes from a unix socket. Whatever parses is encoded again and must parse to the same. */
#include "walls/request.h"

#include <stdlib.h>
#include <string.h>

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);
int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
  char *body = malloc(size + 1); /* +1: a zero-length input still gets a real buffer */
  static walls_request req, again;
  const char *why = NULL;
  if (body == NULL)
    return 0;
  memcpy(body, data, size);
  if (walls_request_parse(body, size, &req, &why) == 0) {
    size_t len = 0;
    char *copy = walls_request_encode(req.argv, req.envp, req.cwd, &len);
    if (copy == NULL || len != size || memcmp(copy, body, size) != 0 ||
        walls_request_parse(copy, len, &again, &why) != 0 || again.argc != req.argc)
      abort();
    free(copy);
  } else if (why == NULL) {
    abort();
  }
  free(body);
  return 0;
}
