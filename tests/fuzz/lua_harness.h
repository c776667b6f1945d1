/* The driver every fuzz target over the program's Lua shares (fuzz_exec_body, fuzz_connect,
 * fuzz_kube_watch, fuzz_slack_context): a Lua state with the engine and cjson preloadable and
 * Lua coverage fed to libFuzzer (lua_coverage.h), the target's harness chunk loaded with the
 * program's Lua directory (SB_LUA_DIR) as its argument and returning the function each input
 * is given to. Any error aborts, so that libFuzzer keeps the input.
 *
 *   int LLVMFuzzerInitialize(int *argc, char ***argv) {
 *     return sb_fuzz_lua_load("fuzz_x", harness, sizeof harness - 1);
 *   }
 *   int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
 *     return sb_fuzz_lua_input(data, size);
 *   } */
#ifndef SB_FUZZ_LUA_HARNESS_H
#define SB_FUZZ_LUA_HARNESS_H

#include <stddef.h>
#include <stdint.h>

int sb_fuzz_lua_load(const char *name, const char *harness, size_t len);
int sb_fuzz_lua_input(const uint8_t *data, size_t size);

#endif
