/* libFuzzer target: the walls spawner's frame and request parsers (src/walls/request.c), which
 * read bytes from a unix socket. Whatever parses is encoded again and must parse to the same;
 * a frame header (the input's first 12 bytes) that decodes is within the protocol's bounds. */
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
  walls_frame frame;
  if (size >= WALLS_FRAME_LEN && walls_frame_decode(data, &frame) == 0) {
    unsigned char header[WALLS_FRAME_LEN];
    walls_frame_encode(header, frame.kind, frame.id, frame.n);
    if (memcmp(header, data, WALLS_FRAME_LEN) != 0 || frame.id == 0 ||
        (frame.kind == WALLS_FRAME_COMMAND && frame.n > WALLS_MAX_REQUEST) ||
        (frame.kind == WALLS_FRAME_SIGNAL && (frame.n < 1 || frame.n > 64)) ||
        (frame.kind != WALLS_FRAME_COMMAND && frame.kind != WALLS_FRAME_SIGNAL))
      abort();
  }
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
