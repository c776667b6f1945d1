/* core.sse: the server-sent-events parser as a Lua object (sse_lua.c; the parser is sse.h). */
#ifndef SB_SSE_LUA_H
#define SB_SSE_LUA_H

#include <lua.h>

int sb_sse_open(lua_State *L); /* sets core.sse */

#endif
