/* Where the program's Lua files are, decided once at start (docs/deploy.md "Layout"):
 *   1. $SWITCHBOARD_LUA_DIR when set and not empty (an operator's or a test's override);
 *   2. <directory of the running binary>/../share/switchboard/lua when it holds the program —
 *      an installed tree (cmake --install, the Debian package), wherever it was moved to;
 *   3. the build tree's lua/ baked in at compile time, so ./build/switchboard runs in a clone.
 * The shipped policies are found beside the Lua directory (policy/init.lua shipped_dir), so
 * they follow the same rule. */
#ifndef SB_INSTALL_LUA_DIR_H
#define SB_INSTALL_LUA_DIR_H

#include <stddef.h>

/* Writes the chosen directory (NUL-terminated) into out[0..size) and returns out; a
 * directory that does not fit falls through to the next rule. built_in: the compile-time
 * fallback, borrowed. */
const char *sb_install_lua_dir(char *out, size_t size, const char *built_in);

#endif
