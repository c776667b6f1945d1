/* The process supervisor's Lua face: core.spawn, proc:wait, proc:kill, core.proc_count,
 * core.kill_all (supervise.c, over spawn.c). */
#ifndef SB_PROC_H
#define SB_PROC_H

#include <lua.h>

/* Sets spawn, proc_count and kill_all; registers the supervisor with the engine's shutdown
 * registry (every live group is killed and reaped at shutdown). */
int sb_proc_open(lua_State *L);

#endif
