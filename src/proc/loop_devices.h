/* core.loop_remove(n): a loop device the walls attached, given back (src/walls/loops.h). */
#ifndef SB_LOOP_DEVICES_H
#define SB_LOOP_DEVICES_H

#include <lua.h>

/* Sets loop_remove on the table at the top of the stack. */
int sb_loop_devices_open(lua_State *L);

#endif
