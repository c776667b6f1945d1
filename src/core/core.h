/* switchboard.core: the one Lua module, assembled from the engine and the feature modules. */
#ifndef SB_CORE_H
#define SB_CORE_H

#include <lua.h>

/* The module opener: the binary registers it in package.preload; core.so exports it. */
int luaopen_switchboard_core(lua_State *L);

#endif
