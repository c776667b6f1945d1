/* The process's own standard input and terminal: core.read_stdin, core.isatty (stdin.c);
 * core.tty_size, core.tty_mode (tty.c). */
#ifndef SB_IO_H
#define SB_IO_H

#include <lua.h>
#include <uv.h>

int sb_stdin_open(lua_State *L);
int sb_tty_open(lua_State *L);

/* Standard input's libuv handle when it is a terminal (opened on first use; owned by stdin.c,
 * closed with the loop), else NULL. For tty.c, which sets its mode. */
uv_tty_t *sb_stdin_tty(void);

#endif
