/* The process supervisor's Lua face: core.spawn, proc:wait, proc:kill, core.proc_count,
 * core.kill_all (supervise.c, over spawn.c). */
#ifndef SB_PROC_H
#define SB_PROC_H

#include <lua.h>
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "spawn.h"

/* Sets spawn, proc_count and kill_all; registers the supervisor with the engine's shutdown
 * registry (every live group is killed and reaped at shutdown). */
int sb_proc_open(lua_State *L);

/* The exec lane's spawn (lane/exec_lane.c): a walled command started from C, supervised as
 * core.spawn's are. `done(ud, L, idx)` is called once, on the loop, with proc:wait's result
 * table at `idx` of L (valid during the call). Returns 0 (with *out), or an errno value with
 * nothing started. */
struct sb_proc;
typedef void (*sb_proc_done_fn)(void *ud, lua_State *L, int result_idx);
int sb_proc_spawn_walled(lua_State *L, const sb_spawn_args *a, const char *socket,
                         int64_t deadline_ms, int64_t grace_ms, int64_t max_output,
                         sb_proc_done_fn done, void *ud, struct sb_proc **out);
/* The exec lane's stream of a long answer (lane/answer_stream.h): after each read that kept
 * stdout bytes, fn(ud, so_far, len, false) with the whole stdout captured so far (valid during
 * the call only; never past max_output). At the command's end, before done, fn(ud, data, len,
 * true) hands the capture itself over (the watcher then owns data, malloc'd or NULL when
 * empty): the result's stdout is "" (no second copy of a megabyte in a Lua string). Called on
 * the loop; fn must not end the command (abort it from a timer instead). */
typedef void (*sb_proc_output_fn)(void *ud, char *so_far, size_t len, bool end);
void sb_proc_watch_stdout(struct sb_proc *p, sb_proc_output_fn fn, void *ud);
/* Kills the command's group now (its result says aborted), unless it has ended. */
void sb_proc_abort(struct sb_proc *p);

#endif
