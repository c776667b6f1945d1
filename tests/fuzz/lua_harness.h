/* The driver every fuzz target over the program's Lua shares (fuzz_exec_body, fuzz_connect,
 * fuzz_kube_watch, fuzz_slack_context): a Lua state with the engine and cjson preloadable and
 * Lua coverage fed to libFuzzer (lua_coverage.h), package.path reaching the program's Lua
 * directory (SB_LUA_DIR), the target's harness chunk loaded with that directory as its argument
 * and returning the function each input is given to. Any error aborts, so that libFuzzer keeps
 * the input.
 *
 *   static const char harness[] = "local m = require('switchboard.x')\n" ... "return function(data) ... end\n";
 *   SB_FUZZ_LUA_TARGET("fuzz_x", harness) */
#ifndef SB_FUZZ_LUA_HARNESS_H
#define SB_FUZZ_LUA_HARNESS_H

#include <stddef.h>
#include <stdint.h>

int sb_fuzz_lua_load(const char *name, const char *harness, size_t len);
int sb_fuzz_lua_input(const uint8_t *data, size_t size);

/* libFuzzer's two entry points for a target whose whole work is its harness chunk. */
#define SB_FUZZ_LUA_TARGET(name, harness)                                                       \
  int LLVMFuzzerInitialize(int *argc, char ***argv) {                                           \
    (void)argc;                                                                                 \
    (void)argv;                                                                                 \
    return sb_fuzz_lua_load(name, harness, sizeof harness - 1);                                 \
  }                                                                                             \
  int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) { return sb_fuzz_lua_input(data, size); }

/* Lua text for a harness: split(data, sizes) cuts data into pieces whose sizes cycle through
 * `sizes`, for the targets that check a stream decoder gives the same split as whole. */
#define SB_FUZZ_LUA_SPLIT                                                                       \
  "local function split(data, sizes)\n"                                                         \
  "  local pieces, pos, i = {}, 1, 1\n"                                                         \
  "  while pos <= #data do\n"                                                                   \
  "    local n = sizes[(i - 1) % #sizes + 1]\n"                                                 \
  "    pieces[#pieces + 1] = data:sub(pos, pos + n - 1)\n"                                      \
  "    pos, i = pos + n, i + 1\n"                                                               \
  "  end\n"                                                                                     \
  "  return pieces\n"                                                                           \
  "end\n"

#endif
