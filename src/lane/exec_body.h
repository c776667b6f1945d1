/* The exec lane's reader of an /exec body (docs/sandboxd.md "The exec lane"): exactly the shape
 * the lane takes — an object of `command` (string), `timeoutMs` (number), `network` (string) and
 * `env` (an object of string → string, or an empty array, as lua-cjson decodes both to an empty
 * table) — read in C, into one buffer owned by the caller's request, with no Lua table, string or
 * garbage per request.
 *
 * Its one promise: whatever it reads, core.json.decode (lua-cjson 2.1, strict numbers) reads
 * the same — the same strings byte for byte (every escape, \uXXXX with surrogate pairs), the
 * same number (strtod's double, as cjson's). Anything else — a field it does not know, a value
 * of another type, a duplicate key (cjson keeps the last), a raw NUL, JSON it does not take
 * (cjson's leniencies: "-.5", "1.") — is "not mine": false, and the Lua path reads the body as
 * it always has. The lane's own rules (a blank command, env names, NUL in a value, the kernel's
 * limits) are the lane's (exec_lane.c), applied to what this gives.
 * tests/fuzz/fuzz_exec_reader.c holds it to cjson; tests/lua/exec_lane_spec.lua to the Lua path. */
#ifndef SB_LANE_EXEC_BODY_H
#define SB_LANE_EXEC_BODY_H

#include <stdbool.h>
#include <stddef.h>

typedef struct {
  const char *name, *value; /* NUL-terminated, in the body's buffer */
  size_t name_len, value_len;
} sb_exec_env_pair;

typedef struct {
  char *buf; /* every decoded string, each NUL-terminated (a decoded string is never longer) */
  const char *command; /* NULL: absent */
  size_t command_len;
  const char *network; /* NULL: absent */
  size_t network_len;
  bool has_timeout;
  double timeout_ms;
  bool has_env;
  sb_exec_env_pair *env; /* sorted by name (bytes), no name twice */
  size_t n_env;
} sb_exec_body;

/* Reads body[0..n) into *out (freed by sb_exec_body_free, also after false); false: not mine. */
bool sb_exec_body_read(const char *body, size_t n, sb_exec_body *out);

/* The request's value for an env name, or NULL when the body does not set it (binary search). */
const sb_exec_env_pair *sb_exec_body_env(const sb_exec_body *b, const char *name, size_t name_len);

void sb_exec_body_free(sb_exec_body *b);

#endif
