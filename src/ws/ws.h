/* The WebSocket client (core.ws): libwebsockets on the engine's own libuv loop.
 * See ws.c and docs/engine.md "WebSocket client". */
#ifndef SB_WS_H
#define SB_WS_H

#include <lua.h>

/* Sets core.ws on the table at the top of the stack, and registers the module's shutdown with
 * the engine: it destroys the libwebsockets context (every connection closes, no waiting task
 * is resumed) so that lws closes its own libuv handles before the engine closes what is left on
 * the loop. */
int sb_ws_open(lua_State *L);

#endif
