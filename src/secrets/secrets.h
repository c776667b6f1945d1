/* core.secrets: a server keeping its secrets to itself (secrets.c, docs/isolation.md). */
#ifndef SB_SECRETS_H
#define SB_SECRETS_H

#include <lua.h>

int sb_secrets_open(lua_State *L);

#endif
