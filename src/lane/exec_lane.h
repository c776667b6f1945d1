/* The /exec lane (docs/sandboxd.md "The exec lane", docs/engine.md): the ordinary /exec request
 * of a thread whose instance Lua armed is served here, start to finish, without a Lua task.
 * Lua programs it (per policy snapshot: the bearer, the budget clamp, the base env, max_output,
 * kill grace, heartbeat; per instance: its spawner socket, network, counter files)
 * and disarms it before anything changes the instance. C takes only what it can answer exactly
 * as the Lua path would; any other request goes to Lua unchanged, and a command whose outcome
 * is not ordinary (a deadline, a signal, a counter moved, truncated or long output, …) is handed
 * back to Lua with its response still open. Lua hears every outcome after the answer (an
 * answered one tallied here and reported in batches, its log lines written here).
 *
 * core.exec_lane.program(srv, program | nil), .arm(srv, key, inst) → bool,
 * .disarm(srv [, key]) → running, .running(srv [, key]) → n, .collect(srv)
 * (sandboxd/lane.lua). */
#ifndef SB_LANE_EXEC_LANE_H
#define SB_LANE_EXEC_LANE_H

#include <lua.h>

/* Sets core.exec_lane. */
int sb_exec_lane_open(lua_State *L);

#endif
