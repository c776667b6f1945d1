/* core.build: the build stamp (docs/contract.md#build-stamp), generated from the tree at build time by
 * cmake/build_stamp.cmake — never hand-bumped. A build outside a git checkout says "unknown"
 * and carries no invented time. */
#include "engine.h"
#include "engine_internal.h"
#include "build_stamp.h"

int sb_build_open(lua_State *L) {
  lua_createtable(L, 0, 2);
  lua_pushstring(L, SB_BUILD_COMMIT);
  lua_setfield(L, -2, "commit");
  if (SB_BUILT_AT[0] != '\0') {
    lua_pushstring(L, SB_BUILT_AT);
    lua_setfield(L, -2, "built_at");
  }
  lua_setfield(L, -2, "build");
  return 0;
}
