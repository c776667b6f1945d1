/* Openers of the engine's own files, called by sb_engine_open (engine.c) only. Each sets its
 * fields on the table at the top of the stack. */
#ifndef SB_ENGINE_INTERNAL_H
#define SB_ENGINE_INTERNAL_H

#include <lua.h>

int sb_tasks_open(lua_State *L);      /* engine.c: run, go, current, suspend, wake, stop */
int sb_timer_open(lua_State *L);      /* timer.c: sleep, now_ms, wall_ms */
int sb_abort_open(lua_State *L);      /* abort.c: signal */
int sb_bounded_open(lua_State *L);    /* bounded.c: call_bounded */
int sb_os_signals_open(lua_State *L); /* os_signals.c: on_signal */
int sb_error_open(lua_State *L);      /* error.c: error, is_error */
int sb_build_open(lua_State *L);      /* build.c: build */
int sb_loop_lag_open(lua_State *L);   /* loop_lag.c: loop_lag */

/* bounded.c: wraps the state's allocator with the accounting one call_bounded limits. Called
 * once by sb_engine_init. */
void sb_bounded_install(lua_State *L);
/* Puts the state's own allocator back; sb_engine_shutdown calls it, since core.so may be
 * unloaded (lua_close's last finalizer) before the state's last block is freed. */
void sb_bounded_uninstall(lua_State *L);

#endif
