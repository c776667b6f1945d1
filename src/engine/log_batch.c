/* core.log_batch: the timer that writes the log's held lines (src/log/log.h sb_log_hold) on the
 * engine's loop. Here, not in src/log: the log is the floor beneath the engine and knows no loop
 * (ARCHITECTURE.md "C floors"); the engine may lean on the log. */
#include "engine.h"
#include "engine_internal.h"
#include "../log/log.h"

#include <lauxlib.h>
#include <stdbool.h>
#include <uv.h>

/* In static storage, as the exec lane's report timer: unref'd (it never keeps the loop alive),
 * made anew for a new loop. The engine's shutdown writes what is held and holds no more. */
static uv_timer_t held_timer;
static uv_loop_t *held_loop;
static bool held_hooked; /* the shutdown hook is registered for this run of the engine */

static void held_due(uv_timer_t *t) {
  (void)t;
  sb_log_flush();
}

static void held_arm(unsigned ms) {
  if (held_loop != sb_loop() || uv_is_closing((uv_handle_t *)&held_timer)) {
    uv_timer_init(sb_loop(), &held_timer);
    uv_unref((uv_handle_t *)&held_timer);
    held_loop = sb_loop();
  }
  if (!uv_is_active((uv_handle_t *)&held_timer))
    uv_timer_start(&held_timer, held_due, ms, 0);
}

static void held_shutdown(void *ud) {
  (void)ud;
  held_hooked = false;
  sb_log_hold(0, NULL);
}

/* core.log_batch(ms): info and debug lines from now are written together, each at most ms
 * after it was made (log.h sb_log_hold); 0 writes every line at once again. Needs the engine's
 * loop (its timer): outside core.run, or once its shutdown began, lines stay unheld. */
static int l_log_batch(lua_State *L) {
  lua_Integer ms = luaL_checkinteger(L, 1);
  luaL_argcheck(L, ms >= 0 && ms <= 60000, 1, "0 to 60000 ms expected");
  if (ms == 0 || sb_loop() == NULL) {
    sb_log_hold(0, NULL);
    return 0;
  }
  if (!held_hooked)
    held_hooked = sb_shutdown_register(held_shutdown, NULL);
  sb_log_hold(held_hooked ? (unsigned)ms : 0, held_hooked ? held_arm : NULL);
  return 0;
}

int sb_log_batch_open(lua_State *L) {
  static const luaL_Reg fns[] = {{"log_batch", l_log_batch}, {NULL, NULL}};
  luaL_setfuncs(L, fns, 0);
  return 0;
}
