/* The Lua face of logging (log_lua.c): core.log, core.log_format, core.log_redact. */
#ifndef SB_LOG_LUA_H
#define SB_LOG_LUA_H

#include <lua.h>

int sb_log_open(lua_State *L);

/* A float as core.log writes a Lua number field (LUA_NUMBER_FMT, "3.0" for a whole one, as
 * lua_tostring): for C that writes the same lines without a Lua value (the exec lane's). */
void sb_log_float_text(char *buf, size_t n, double v);

#endif
