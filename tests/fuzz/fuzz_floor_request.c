/* libFuzzer target for bench/floor_server.c, the floor contender of bench/paired.lua: a server
 * on loopback that parses what a client sends. The same llhttp callbacks, the body's "command"
 * and the JSON escaping of output, on every input (pipelined requests included). Checked:
 *   - no read or write out of bounds, no undefined behaviour (ASan, UBSan);
 *   - the command taken from a body is never longer than the body, and NUL-terminated;
 *   - escaped output (of the command, and of the input's raw bytes) has no control byte and no
 *     quote that is not escaped: it stays inside its JSON string. */
#define FLOOR_FUZZ 1
#include "../../bench/floor_server.c"

#include <stdint.h>

static void check_escaped(const char *p, size_t n) {
  buf doc = {0};
  json_escape(&doc, p, n);
  for (size_t i = 0; i < doc.len; i++) {
    unsigned char c = (unsigned char)doc.p[i];
    if (c < 0x20 || c == '"')
      abort(); /* a raw control byte or a quote that would end the string */
    if (c == '\\') {
      if (i + 1 >= doc.len || strchr("\"\\ntru", doc.p[i + 1]) == NULL)
        abort(); /* an escape that JSON does not have, or none at the end */
      i++;
    }
  }
  free(doc.p);
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
  if (bearer == NULL) {
    bearer = strdup("Bearer fuzz-token");
    bearer_len = strlen(bearer);
    json_plain_init();
  }
  llhttp_settings_t settings;
  floor_settings(&settings);
  request r;
  memset(&r, 0, sizeof r);
  llhttp_init(&r.parser, HTTP_REQUEST, &settings);
  r.parser.data = &r;
  buf cmd = {0};
  const char *at = (const char *)data, *end = at + size;
  while (at < end) {
    llhttp_errno_t e = llhttp_execute(&r.parser, at, (size_t)(end - at));
    if (e != HPE_PAUSED)
      break;
    at = llhttp_get_error_pos(&r.parser);
    if (json_command(&r.body, &cmd) == 0) {
      if (cmd.len == 0 || cmd.len > r.body.len + 1 || cmd.p[cmd.len - 1] != '\0')
        abort();
      check_escaped(cmd.p, cmd.len - 1);
    }
    r.url.len = r.body.len = r.field.len = r.value.len = 0;
    r.authorized = r.has_thread = r.complete = 0;
    llhttp_resume(&r.parser);
  }
  check_escaped((const char *)data, size);
  free(r.field.p);
  free(r.value.p);
  free(r.url.p);
  free(r.body.p);
  free(cmd.p);
  return 0;
}
