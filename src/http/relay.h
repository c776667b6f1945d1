/* core.http.connect (a raw TCP connection to an upstream, made in a network namespace when
 * asked) and the byte relay behind res:relay (server.c): see relay.c. */
#ifndef SB_HTTP_RELAY_H
#define SB_HTTP_RELAY_H

#include "server_conn.h"

#include <lua.h>
#include <stddef.h>

typedef struct sb_upstream sb_upstream;

/* A socket made inside the network namespace `netns_fd` (-1: this thread's own), close-on-exec:
 * the thread steps in for the socket(2) alone and back. -1 with errno on failure. */
int sb_socket_in_netns(int netns_fd, int family, int type, int protocol);

/* The upstream at stack index idx (raises when it is not one). */
sb_upstream *sb_upstream_check(lua_State *L, int idx);

/* Writes `head` to the client's connection `c` (detached from its response already), then
 * relays bytes both ways between it and the upstream at up_idx until either ends. Yields the
 * running task `L` until then (true), or returns false at once (pushed) when it could not
 * start; either way the client's connection is ended. Use as `return sb_relay_start(…)`. */
int sb_relay_start(lua_State *L, sb_http_conn *c, int up_idx, const char *head, size_t len);

/* Sets core.http.connect (the module table is at the top of the stack) and registers the
 * upstream's class. */
void sb_http_relay_open(lua_State *L);

#endif
