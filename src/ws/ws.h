/* The WebSocket client (core.ws): libwebsockets on the engine's own libuv loop.
 * See ws.c and docs/engine.md "WebSocket client". */
#ifndef SB_WS_H
#define SB_WS_H

#include <lua.h>

/* Sets core.ws on the table at the top of the stack. */
int sb_ws_open(lua_State *L);

/* Destroys the libwebsockets context (every connection closes) so that its libuv handles are
 * closed by lws itself before the engine closes what is left on the loop. Safe to call when no
 * connection was ever made. */
void sb_ws_shutdown(void);

#endif
