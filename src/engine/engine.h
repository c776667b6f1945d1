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

/* True when `L` is a running engine task that may yield here (sb_task_check's test, without
 * raising): a primitive that can also work synchronously uses it to choose. */
bool sb_task_running(lua_State *L);

/* Yields the running task `L` from a C function; the values later passed with
 * sb_task_complete() become that C function's results. Use as `return sb_task_yield(L);`. */
int sb_task_yield(lua_State *L);

/* Hands `nargs` values already pushed on `task`'s own stack to the suspended task and resumes
 * it (now, or on the next turn when Lua is running). */
void sb_task_complete(lua_State *task, int nargs);

/* ---- The one protected-call path ----------------------------------------------------------
 *
 * Every C->Lua call runs under one message handler, sb_traceback: the error value becomes
 * "message\nstack traceback:\n..." where the message is a string error as is, an error object's
 * __tostring (a core.error's message), a table's string `message` field, or
 * "(error object is a <type> value)" — never "table: 0x...". lua_resume has no message handler,
 * so code that resumes a coroutine uses sb_push_traceback, which words the same text from the
 * dead coroutine's stack. */

/* A lua_CFunction for lua_pcall's msgh: turns the error at index 1 into the text above. */
int sb_traceback(lua_State *L);

/* Pushes onto L the text above for the error value at the top of L, with the traceback of
 * `co` (a coroutine whose lua_resume just failed; its stack is intact) from `level`. */
void sb_push_traceback(lua_State *L, lua_State *co, int level);

/* Pushes onto L the message part alone (no traceback) of the value at `idx`. */
const char *sb_error_text(lua_State *L, int idx);

/* Calls the function at the top of the main state's stack (below its `nargs` arguments) under
 * sb_traceback. A raise is logged with `where` and its location; it never escapes.
 * Returns true on success; results are discarded. The callee must not yield. */
bool sb_pcall(lua_State *L, int nargs, const char *where);

/* ---- Errors (error.c): the one error type, also core.error / core.is_error ----------------
 *
 * An error is a table with the engine's error metatable ("switchboard.error"): `kind` (a
 * stable word), `message` (never empty), optional `code` and `cause`, and any other fields
 * the creator adds; tostring(err) is its message. Every engine failure is `nil, err`. */

/* Pushes a new error {kind, message}; an empty or NULL message becomes
 * "(<kind> error without a message)". Add more fields with lua_setfield(L, -2, ...).
 * Returns 1. */
int sb_error_push(lua_State *L, const char *kind, const char *message);

/* Pushes the standard failure pair `nil, <error kind/message>`; returns 2. */
int sb_push_fail(lua_State *L, const char *kind, const char *message);

/* True when the value at `idx` is an engine error. */
bool sb_is_error(lua_State *L, int idx);

/* Monotonic time in milliseconds with sub-millisecond precision. */
double sb_now_ms(void);

/* Starts one-shot timer `t` to fire `ms` from now. libuv measures a timer from the time it read
 * at the start of the loop's tick; after long work in one tick (a large answer encoded, many
 * tasks run) that time is stale, and a timer started then fires early by as much: a command's
 * deadline would cut it short, a slow-peer watch would end a peer that kept reading. The time is
 * read afresh first. Every timer that stands for a duration someone was promised starts here. */
void sb_timer_start(uv_timer_t *t, uv_timer_cb cb, uint64_t ms);

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

/* ---- Lifetime -----------------------------------------------------------------------------
 *
 * The engine is the ground floor: it knows no feature module. A module that owns live
 * resources (processes, connections, transfers) registers a shutdown callback; at shutdown the
 * engine calls them in reverse registration order, once, while the loop is still open (so they
 * may uv_close their handles and need not know what was torn down before them), then runs the
 * loop until every handle is closed and closes it. No task is resumed once shutdown began. */

typedef void (*sb_shutdown_fn)(void *ud);
/* Registers fn(ud). Returns false when out of memory (nothing registered). */
bool sb_shutdown_register(sb_shutdown_fn fn, void *ud);
/* Forgets the registration of exactly (fn, ud); harmless when absent. Safe from a callback. */
void sb_shutdown_unregister(sb_shutdown_fn fn, void *ud);

/* Binds the engine to `L`'s main state (once per process). False when already bound to
 * another state. */
bool sb_engine_init(lua_State *L);
/* Sets the engine's own fields (tasks, timers, signals, abort signals, call_bounded,
 * core.error, build stamp) on the table at the top of the stack. */
int sb_engine_open(lua_State *L);
/* Runs the shutdown callbacks, closes every handle and the loop. Never call it from inside a
 * libuv callback (the loop is not reentrant): the binary calls it after core.run returned, the
 * module's finalizer at lua_close. Idempotent. */
void sb_engine_shutdown(void);
/* Asks core.run to return as soon as the current callback ends, with the process to exit
 * with `status` (TERM/INT without a handler). Safe from a libuv callback. */
void sb_engine_request_exit(int status);
/* The status asked for with sb_engine_request_exit, or -1. */
int sb_engine_exit_status(void);

/* ---- Userdata classes, module tables, memory that raises (class.c) -----------------------
 *
 * A C module that hands Lua an object describes its class once and registers it in its opener;
 * objects get it with luaL_setmetatable(L, name) and are checked with luaL_checkudata. */

typedef struct sb_class {
  const char *name;         /* the registry name, luaL_newmetatable's */
  const luaL_Reg *methods;  /* what obj:method(...) finds through __index */
  const luaL_Reg *fields;   /* read-only computed fields: obj.name is fn(obj)'s one result;
                               NULL for none (then __index is the method table itself) */
  const luaL_Reg *meta;     /* metamethods set on the metatable: __gc, __close, __tostring */
} sb_class;

/* Makes the class's metatable unless it exists; the stack is left as it was. */
void sb_class_register(lua_State *L, const sb_class *cls);

/* Sets `fns` on the table `name` inside the table at the top of the stack, making it first
 * when absent (two modules may share one, as the HTTP client and server share core.http). The
 * stack is left as it was. */
void sb_module_table(lua_State *L, const char *name, const luaL_Reg *fns);

/* Pushes a new table whose keys or values (`mode`: "k", "v" or "kv") are weak. */
void sb_push_weak_table(lua_State *L, const char *mode);

/* calloc(n, size) for a call from Lua: raises "out of memory" (as lua_newuserdata does) instead
 * of returning NULL, so the caller must own nothing that would leak by the raise. */
void *sb_calloc(lua_State *L, size_t n, size_t size);

#endif
