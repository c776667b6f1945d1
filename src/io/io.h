/* The process's own standard input: core.read_stdin, core.isatty (stdin.c). */
#ifndef SB_IO_H
#define SB_IO_H

#include <lua.h>

int sb_stdin_open(lua_State *L);

#endif
