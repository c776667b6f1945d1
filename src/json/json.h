/* core.json (decode, encode, null) and core.json_string (docs/engine.md "JSON"), in C. */
#ifndef SB_JSON_H
#define SB_JSON_H

#include <lua.h>

int sb_json_open(lua_State *L);

#endif
