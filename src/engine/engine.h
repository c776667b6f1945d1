/* The engine: one libuv loop, one Lua state, and the task scheduler that lets Lua code await
 * engine primitives in straight-line code. Every other C module builds on this header.
 *
 * Tasks are Lua coroutines anchored in the registry from `core.go` until they return. A
 * primitive that waits pins nothing else: it remembers the task's lua_State, yields it with
 * sb_task_yield(), and later hands it values with sb_task_complete(), which resumes the task at
 * once when called from a libuv callback and defers it to the next loop turn when called from
 * inside Lua (so an abort raised by one task never runs another task on its C stack). */
#ifndef SB_ENGINE_H
#define SB_ENGINE_H

#include <lua.h>
#include <lauxlib.h>
#include <stdbool.h>
#include <stdint.h>
#include <uv.h>

/* The process-wide engine. One per process: a second Lua state cannot open the module. */
uv_loop_t *sb_loop(void);
lua_State *sb_main_state(void);

/* Raises a Lua error unless `L` is a running engine task; used by every waiting primitive. */
void sb_task_check(lua_State *L, const char *primitive);

/* Yields the running task `L` from a C function; the values later passed with
 * sb_task_complete() become that C function's results. Use as `return sb_task_yield(L);`. */
int sb_task_yield(lua_State *L);

/* Hands `nargs` values already pushed on `task`'s own stack to the suspended task and resumes
 * it (now, or on the next turn when Lua is running). */
void sb_task_complete(lua_State *task, int nargs);

/* Calls the function at the top of the main state's stack (below its `nargs` arguments) under
 * the traceback handler. A raise is logged with `where` and its location; it never escapes.
 * Returns true on success; results are discarded. The callee must not yield. */
bool sb_pcall(lua_State *L, int nargs, const char *where);

/* Pushes the standard failure pair `nil, {kind = kind, message = message}`; returns 2. */
int sb_push_fail(lua_State *L, const char *kind, const char *message);

/* Monotonic time in milliseconds with sub-millisecond precision. */
double sb_now_ms(void);

/* ---- Abort signals (abort.c) ----------------------------------------------------------- */

typedef struct sb_abort sb_abort;
typedef struct sb_abort_listener sb_abort_listener;
/* Called once when the signal fires, after `listener` was detached (owner is then NULL). */
typedef void (*sb_abort_fn)(sb_abort_listener *listener, sb_abort *sig);

/* Embedded in whoever waits on a signal; unlink it when the wait ends. */
struct sb_abort_listener {
  sb_abort_fn fn;
  sb_abort *owner; /* NULL when not attached */
  sb_abort_listener *prev, *next;
};

/* Returns the signal at `idx` (raises when it is not one), or NULL for nil/none. */
sb_abort *sb_abort_opt(lua_State *L, int idx);
bool sb_abort_fired(const sb_abort *sig);
/* Attaches `listener`; when the signal already fired, calls it at once. */
void sb_abort_listen(sb_abort *sig, sb_abort_listener *listener, sb_abort_fn fn);
void sb_abort_unlisten(sb_abort_listener *listener);
/* Pushes the abort failure pair `nil, {kind="aborted", message=…, reason=…}`; returns 2. */
int sb_abort_push_fail(lua_State *L, sb_abort *sig);
int sb_abort_open(lua_State *L); /* sets core.signal */

/* ---- Module openers: each sets its fields on the table at the top of the stack. ---------- */
int sb_tasks_open(lua_State *L);
int sb_timer_open(lua_State *L);
int sb_bounded_open(lua_State *L);
int sb_os_signals_open(lua_State *L);
int sb_proc_open(lua_State *L);
int sb_http_client_open(lua_State *L);
int sb_http_server_open(lua_State *L);
int sb_crypto_open(lua_State *L);
int sb_fs_open(lua_State *L);
int sb_log_open(lua_State *L);
int sb_build_open(lua_State *L);
int sb_stdin_open(lua_State *L);
int sb_sse_open(lua_State *L); /* src/sse/sse_lua.c: core.sse */

/* Called by the binary before exit and by the module's finalizer: kill live process groups,
 * close every handle and run the loop until they are closed. */
void sb_engine_shutdown(void);
void sb_proc_kill_all(int signo);
int sb_proc_live_count(void);

#endif
