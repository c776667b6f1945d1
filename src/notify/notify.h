/* core.notify: the service manager's readiness protocol (sd_notify(3)), without libsystemd.
 * systemd (Type=notify units in deploy/systemd/) passes $NOTIFY_SOCKET, a unix datagram
 * socket; the service sends "READY=1", "RELOADING=1\nMONOTONIC_USEC=…", "STOPPING=1" and
 * "STATUS=…" there. Lua decides what to say and when (lua/switchboard/notify.lua); this
 * module only moves the bytes:
 *   core.notify.send(text)       → true (sent) | false (no NOTIFY_SOCKET: not under a
 *                                  manager, nothing to do) | nil, {kind = "transport", message}
 *   core.notify.monotonic_usec() → CLOCK_MONOTONIC in microseconds, for MONOTONIC_USEC= */
#ifndef SB_NOTIFY_H
#define SB_NOTIFY_H

#include <lua.h>

/* Sets core.notify on the table at the top of the stack. */
int sb_notify_open(lua_State *L);

#endif
