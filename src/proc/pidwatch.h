/* core.pid_watch: whether a process has ended, through a pidfd (pidwatch.c). */
#ifndef SB_PIDWATCH_H
#define SB_PIDWATCH_H

#include <lua.h>

/* Sets pid_watch on the table at the top of the stack. */
int sb_pidwatch_open(lua_State *L);

#endif
