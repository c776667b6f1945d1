/* core.store: an SQLite database whose queries run in libuv's thread pool (store.c). */
#ifndef SB_STORE_H
#define SB_STORE_H

#include <lua.h>

/* Sets core.store on the table at the top of the stack. */
int sb_store_open(lua_State *L);

#endif
