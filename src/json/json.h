/* core.json_string (docs/engine.md): command output as a JSON string literal, in C. */
#ifndef SB_JSON_H
#define SB_JSON_H

#include <lua.h>

int sb_json_open(lua_State *L);

#endif
