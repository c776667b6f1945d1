/* The Lua collector's pace, set from the heap's size (docs/engine.md "The collector's pace").
 *
 * Lua's incremental collector starts a cycle once the heap has grown to `pause` % of what the
 * last cycle left, so with its default (200) a process holds as much garbage as live data at
 * its peak. For a small heap that is cheap headroom; for a server holding thousands of threads
 * (sandboxd at 2,000 at once: ~18 KiB live each) it was a third of the RSS. So the garbage
 * allowed is bounded in bytes instead: a cycle starts once HEADROOM_KIB have been allocated past
 * the live heap, never later than Lua's default and never sooner than PAUSE_MIN. A small heap
 * (every process at rest; a few MiB) keeps the default pace and its CPU cost; only a heap past
 * HEADROOM_KIB is collected more often, in proportion to what it holds.
 *
 * An unreferenced timer (it never keeps the loop alive) re-reads the heap's size every
 * INTERVAL_MS: a cycle takes the pause it finds when it ends. (From a finalizer, the natural
 * place, lua_gc is refused while the collector runs.) */
#include "engine.h"
#include "engine_internal.h"

#define INTERVAL_MS 1000
#define HEADROOM_KIB (4 * 1024)
#define PAUSE_MIN 110     /* past ~40 MiB live the headroom is a tenth of it: not less */
#define PAUSE_DEFAULT 200 /* Lua's own */
#define STEP_MULTIPLIER 200 /* a cycle's work in half of Lua's allocation per step (100):
                             * the heap does not outgrow a short pause while a cycle runs */

static struct {
  uv_timer_t timer;
  uv_loop_t *loop;
  lua_State *L;
} pace;

int sb_gc_pause_for(int heap_kib) {
  if (heap_kib <= 0)
    return PAUSE_DEFAULT;
  long pause = 100 + 100L * HEADROOM_KIB / heap_kib;
  if (pause > PAUSE_DEFAULT)
    return PAUSE_DEFAULT;
  return pause < PAUSE_MIN ? PAUSE_MIN : (int)pause;
}

static void set_pace(uv_timer_t *t) {
  (void)t;
  /* the count includes garbage not yet collected: the pause it gives is a little shorter */
  lua_gc(pace.L, LUA_GCINC, sb_gc_pause_for(lua_gc(pace.L, LUA_GCCOUNT)), STEP_MULTIPLIER, 0);
}

void sb_gc_pace_start(lua_State *L, uv_loop_t *loop) {
  if (pace.loop == loop && uv_is_active((uv_handle_t *)&pace.timer) && !uv_is_closing((uv_handle_t *)&pace.timer))
    return;
  pace.loop = loop;
  /* the state's main thread: `L` may be a task's coroutine, collected long before the loop ends */
  lua_rawgeti(L, LUA_REGISTRYINDEX, LUA_RIDX_MAINTHREAD);
  pace.L = lua_tothread(L, -1);
  lua_pop(L, 1);
  set_pace(NULL);
  uv_timer_init(loop, &pace.timer);
  /* Closed by the engine's shutdown with every handle no module registered for (static
   * storage: nothing to free). */
  uv_unref((uv_handle_t *)&pace.timer);
  uv_timer_start(&pace.timer, set_pace, INTERVAL_MS, INTERVAL_MS);
}
