/* Coverage of Lua code for libFuzzer. The interpreter and the program's Lua are not
 * instrumented, so a target that drives Lua (fuzz_exec_body, fuzz_connect) would show libFuzzer
 * no new coverage for any input: it would keep no input and shrink to one byte. A line hook
 * feeds libFuzzer's extra counters instead: one counter per source line reached (chunk, line)
 * and one per edge between consecutive lines (previous line → line), so an input that takes a
 * new branch of the Lua code is kept and mutated further.
 *
 *   sb_lua_coverage_attach(L);   after luaL_newstate, before the harness loads (coroutines
 *                                created later inherit the hook) */
#ifndef SB_FUZZ_LUA_COVERAGE_H
#define SB_FUZZ_LUA_COVERAGE_H

#include <lua.h>

void sb_lua_coverage_attach(lua_State *L);

#endif
