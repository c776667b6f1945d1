/* The HTTP modules' openers: core.http.request (client.c) and core.http.serve (server.c). */
#ifndef SB_HTTP_H
#define SB_HTTP_H

#include <lua.h>

/* Sets core.http.request; transfers in flight are dropped at engine shutdown. */
int sb_http_client_open(lua_State *L);
/* Sets core.http.serve; listening servers are closed at engine shutdown. */
int sb_http_server_open(lua_State *L);

#endif
