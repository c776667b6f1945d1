/* The Lua face of logging (log_lua.c): core.log, core.log_format, core.log_redact. */
#ifndef SB_LOG_LUA_H
#define SB_LOG_LUA_H

#include <lua.h>

int sb_log_open(lua_State *L);

#endif
