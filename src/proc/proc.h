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

/* A command's end as C hears it (sb_proc_spawn_walled): proc:wait's result without Lua. `out`
 * and `err` are the captures themselves (malloc'd, or NULL when nothing came), `*_len` bytes
 * kept of them and `*_dropped` past the cap. The callback may take either buffer: it sets the
 * field to NULL and frees it later; the supervisor frees what is left after the call. */
typedef struct {
  int64_t exit;     /* 128 + signal when signalled, 124 when the deadline ended it */
  int signal;       /* 0: not signalled */
  bool timed_out, aborted;
  char *out, *err;
  size_t out_len, err_len, out_dropped, err_dropped;
  double duration_ms;
  int pid;
} sb_proc_result;

/* Pushes r as proc:wait's result table (what core.spawn's callers get) onto L. */
void sb_proc_result_push(lua_State *L, const sb_proc_result *r);

/* The exec lane's spawn (lane/exec_lane.c): a walled command started from C, supervised as
 * core.spawn's are (the same record, timers, captures and link), but owned by C: no Lua
 * userdata, no result table, no registry reference. `done(ud, r)` is called once, on the loop,
 * with the result (valid during the call; see sb_proc_result for its buffers). The record goes
 * by itself once its handles close after that. Returns 0 (with *out), or an errno value with
 * nothing started. */
struct sb_proc;
typedef void (*sb_proc_done_fn)(void *ud, sb_proc_result *r);
int sb_proc_spawn_walled(const sb_spawn_args *a, const char *socket, int64_t deadline_ms,
                         int64_t grace_ms, int64_t max_output, sb_proc_done_fn done, void *ud,
                         struct sb_proc **out);
/* The exec lane's stream of a long answer (lane/answer_stream.h): after each read that kept
 * stdout bytes, fn(ud, so_far, len) with the whole stdout captured so far (valid during the
 * call only; never past max_output). The capture itself comes with the result (r->out). Called
 * on the loop; fn must not end the command (abort it from a timer instead). NULL: no more. */
typedef void (*sb_proc_output_fn)(void *ud, char *so_far, size_t len);
void sb_proc_watch_stdout(struct sb_proc *p, sb_proc_output_fn fn, void *ud);
/* The caller goes first (the engine's shutdown): the command is told no more — neither its
 * output nor its end — and the supervisor ends it and frees its record as it does any. */
void sb_proc_forget(struct sb_proc *p);
/* How many Lua objects the supervisor has made since the process started: records (a
 * core.spawn's userdata) and results (proc:wait's tables). A command the exec lane answers
 * makes neither (sandboxd's /metrics, switchboard_proc_lua_objects{kind}). */
void sb_proc_lua_objects(uint64_t *records, uint64_t *results);
/* Kills the command's group now (its result says aborted), unless it has ended. */
void sb_proc_abort(struct sb_proc *p);

#endif
