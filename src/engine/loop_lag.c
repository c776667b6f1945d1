/* core.loop_lag(): how late the event loop runs what is due (docs/engine.md).
 *
 * A repeating timer every SAMPLE_MS: when it fires, the time since it last fired, minus
 * SAMPLE_MS, is how long the loop was kept from it — a callback or a Lua task that held the
 * loop, or a pass of the loop with much to do. That is what every heartbeat and every other
 * timer waits too. (uv_metrics_idle_time says how long the loop slept, not how late a timer
 * ran: a loop busy with many short callbacks is never idle and yet has no lag.) The timer is
 * unreferenced, so it never keeps the loop alive, and started by the first call. The last
 * WINDOW samples are kept for quantiles; the totals count every sample since the start. */
#include "engine.h"
#include "engine_internal.h"

#include <stdlib.h>
#include <string.h>

#define SAMPLE_MS 100
#define WINDOW 600 /* the last minute at SAMPLE_MS */

static struct {
  uv_timer_t timer;
  uv_loop_t *loop; /* the loop the timer was made on (a spec's engine may be made anew) */
  uint64_t last_ns;
  double window[WINDOW]; /* seconds, a ring */
  size_t next, filled;
  double sum, max;       /* seconds, since the start */
  uint64_t count;
} lag;

static void sampled(uv_timer_t *t) {
  (void)t;
  uint64_t now = uv_hrtime();
  double late = ((double)(now - lag.last_ns) / 1e9) - SAMPLE_MS / 1000.0;
  if (late < 0)
    late = 0; /* the timer's own granularity (whole ms of the loop's clock) */
  lag.last_ns = now;
  lag.window[lag.next] = late;
  lag.next = (lag.next + 1) % WINDOW;
  if (lag.filled < WINDOW)
    lag.filled++;
  lag.sum += late;
  lag.count++;
  if (late > lag.max)
    lag.max = late;
}

static void ensure_started(void) {
  uv_loop_t *loop = sb_loop();
  /* (a loop made anew at the same address after a shutdown closed the timer: started again) */
  if (lag.loop == loop && uv_is_active((uv_handle_t *)&lag.timer) && !uv_is_closing((uv_handle_t *)&lag.timer))
    return;
  memset(&lag, 0, sizeof lag);
  lag.loop = loop;
  uv_timer_init(loop, &lag.timer);
  /* Closed by the engine's shutdown with every handle no module registered for (static
   * storage: nothing to free). */
  uv_unref((uv_handle_t *)&lag.timer);
  lag.last_ns = uv_hrtime();
  uv_timer_start(&lag.timer, sampled, SAMPLE_MS, SAMPLE_MS);
}

static int by_value(const void *a, const void *b) {
  double x = *(const double *)a, y = *(const double *)b;
  return (x > y) - (x < y);
}

/* The q-quantile of the sorted samples (nearest rank). */
static double quantile(const double *sorted, size_t n, double q) {
  if (n == 0)
    return 0;
  size_t rank = (size_t)(q * (double)n + 0.999999);
  if (rank < 1)
    rank = 1;
  if (rank > n)
    rank = n;
  return sorted[rank - 1];
}

/* core.loop_lag() → {p50, p99, max_window, max, sum, count, window_s} (seconds). */
static int l_loop_lag(lua_State *L) {
  ensure_started();
  double sorted[WINDOW];
  size_t n = lag.filled;
  memcpy(sorted, lag.window, n * sizeof *sorted);
  qsort(sorted, n, sizeof *sorted, by_value);
  lua_createtable(L, 0, 7);
  lua_pushnumber(L, quantile(sorted, n, 0.5));
  lua_setfield(L, -2, "p50");
  lua_pushnumber(L, quantile(sorted, n, 0.99));
  lua_setfield(L, -2, "p99");
  lua_pushnumber(L, n > 0 ? sorted[n - 1] : 0);
  lua_setfield(L, -2, "max_window");
  lua_pushnumber(L, lag.max);
  lua_setfield(L, -2, "max");
  lua_pushnumber(L, lag.sum);
  lua_setfield(L, -2, "sum");
  lua_pushinteger(L, (lua_Integer)lag.count);
  lua_setfield(L, -2, "count");
  lua_pushnumber(L, (double)n * SAMPLE_MS / 1000.0);
  lua_setfield(L, -2, "window_s");
  return 1;
}

int sb_loop_lag_open(lua_State *L) {
  static const luaL_Reg fns[] = {{"loop_lag", l_loop_lag}, {NULL, NULL}};
  luaL_setfuncs(L, fns, 0);
  return 0;
}
