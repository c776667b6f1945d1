/* Spawning off the loop's thread (issue 43, the loop-lag row).
 *
 * posix_spawn is a vfork: the thread that calls it is suspended until the child has exec'd, and
 * on a saturated host the child waits for a time slice first — 37–82 ms measured at 500 walled
 * threads, every instance start (its `hold` helper) and stop (its `reap` helper) holding the
 * loop that long. Here one thread of its own makes those calls instead: the loop hands it a copy
 * of argv, env and cwd, goes on, and is told the result (the pid, its pidfd and pipes, or an
 * errno value) through a uv_async, in the order asked. The child is then watched and reaped on
 * the loop exactly as one spawned there (supervise.c: its pidfd).
 *
 * The thread lives as long as the engine: a child that asks PR_SET_PDEATHSIG (the walls helpers
 * do) is signalled when the *thread* that made it ends, not the process. At the engine's
 * shutdown the thread is joined after its current spawn, and a child it started that nobody has
 * taken yet is killed with its group and reaped; no callback runs then (no task is resumed). */
#ifndef SB_PROC_SPAWN_THREAD_H
#define SB_PROC_SPAWN_THREAD_H

#include "spawn.h"

#include <stdbool.h>

/* Called on the loop's thread with the result of sb_spawn_start: rc 0 with `child` (the callee
 * now owns its descriptors), or an errno value with nothing left open. `program` and `cwd` are
 * the job's copies of argv[0] and cwd (NULL: none), valid during the call, for a message. */
typedef void (*sb_spawn_done_fn)(void *ud, int rc, const sb_spawned *child, const char *program,
                                 const char *cwd);

/* Queues the spawn of `a` (copied: the caller's strings may go at once) on the spawning thread,
 * started at the first call. Returns 0, then `done(ud, …)` is called exactly once, later, from
 * the loop (never from inside this call) unless the engine shuts down first; or an errno value
 * (no memory, no thread) with nothing queued: the caller spawns on its own thread instead. */
int sb_spawn_off_loop(const sb_spawn_args *a, bool with_stdin, sb_spawn_done_fn done, void *ud);

#endif
