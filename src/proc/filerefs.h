/* The host's file table and who holds it (docs/isolation.md "The host's file table"):
 * core.file_table() and core.file_refs(...), over /proc (filerefs.c). */
#ifndef SB_FILEREFS_H
#define SB_FILEREFS_H

#include <lua.h>

/* Sets file_table and file_refs on the table at the top of the stack; registers the counts in
 * flight with the engine's shutdown registry. */
int sb_filerefs_open(lua_State *L);

#endif
