/* Openers of the engine's own files, called by sb_engine_open (engine.c) only. Each sets its
 * fields on the table at the top of the stack. */
#ifndef SB_ENGINE_INTERNAL_H
#define SB_ENGINE_INTERNAL_H

#include <lua.h>
#include <uv.h>

int sb_tasks_open(lua_State *L);      /* engine.c: run, go, current, suspend, wake, stop */
int sb_timer_open(lua_State *L);      /* timer.c: sleep, now_ms, wall_ms */
int sb_abort_open(lua_State *L);      /* abort.c: signal */
int sb_bounded_open(lua_State *L);    /* bounded.c: call_bounded */
int sb_os_signals_open(lua_State *L); /* os_signals.c: on_signal */
int sb_error_open(lua_State *L);      /* error.c: error, is_error */
int sb_build_open(lua_State *L);      /* build.c: build */
int sb_loop_lag_open(lua_State *L);   /* loop_lag.c: loop_lag */
int sb_log_batch_open(lua_State *L);  /* log_batch.c: log_batch */

/* gc_pace.c: the collector's pause from the heap's size, re-read every second on an unreferenced
 * timer of `loop`. Called by sb_engine_init. sb_gc_pause_for: the pause for a heap of that size. */
void sb_gc_pace_start(lua_State *L, uv_loop_t *loop);
int sb_gc_pause_for(int heap_kib);

/* bounded.c: wraps the state's allocator with the accounting one call_bounded limits. Called
 * once by sb_engine_init. */
void sb_bounded_install(lua_State *L);
/* Puts the state's own allocator back; sb_engine_shutdown calls it, since core.so may be
 * unloaded (lua_close's last finalizer) before the state's last block is freed. */
void sb_bounded_uninstall(lua_State *L);

#endif
