/* core.sleep, core.every, core.now_ms, core.wall_ms. */
#include "engine.h"
#include "list.h"
#include "engine_internal.h"

#include <stddef.h>
#include <stdlib.h>
#include <sys/time.h>

typedef struct sleeper {
  uv_timer_t timer;
  lua_State *task;
  sb_abort_listener on_abort;
  sb_abort *fired_by; /* the signal that ended the sleep, or NULL */
  int signal_ref; /* keeps the signal alive while we listen to it */
  struct sleeper *prev, *next; /* the live list, for shutdown */
} sleeper;

static sleeper *live; /* sleepers whose timer is not closing yet */

static void sleeper_closed(uv_handle_t *h) { free(h->data); }

static void live_remove(sleeper *s) { SB_LIST_REMOVE(live, s); }

static void sleeper_finish(sleeper *s) {
  live_remove(s);
  lua_State *task = s->task;
  sb_abort *sig = s->fired_by;
  sb_abort_unlisten(&s->on_abort);
  uv_timer_stop(&s->timer);
  int nargs;
  if (sig != NULL) {
    nargs = sb_abort_push_fail(task, sig);
  } else {
    lua_pushboolean(task, 1);
    nargs = 1;
  }
  luaL_unref(sb_main_state(), LUA_REGISTRYINDEX, s->signal_ref);
  uv_close((uv_handle_t *)&s->timer, sleeper_closed);
  sb_task_complete(task, nargs);
}

static void sleeper_fired(uv_timer_t *t) { sleeper_finish(t->data); }

static void sleeper_aborted(sb_abort_listener *l, sb_abort *sig) {
  sleeper *s = (sleeper *)((char *)l - offsetof(sleeper, on_abort));
  s->fired_by = sig;
  sleeper_finish(s);
}

static int l_sleep(lua_State *L) {
  lua_Number ms = luaL_checknumber(L, 1);
  luaL_argcheck(L, ms >= 0 && ms < 1e12, 1, "a duration in milliseconds expected");
  sb_abort *sig = sb_abort_opt(L, 2);
  sb_task_check(L, "core.sleep");
  if (sig != NULL && sb_abort_fired(sig))
    return sb_abort_push_fail(L, sig);
  sleeper *s = sb_calloc(L, 1, sizeof *s);
  s->task = L;
  s->signal_ref = LUA_NOREF;
  SB_LIST_PUSH(live, s);
  uv_timer_init(sb_loop(), &s->timer);
  s->timer.data = s;
  /* At least 1 ms: libuv runs, in the same pass, a timer due at the loop's current time, and
   * this task is resumed from a timer callback. A task looping on core.sleep(0) then re-armed
   * a timer that was already due, and the timer phase never ended: no other task, no I/O. */
  sb_timer_start(&s->timer, sleeper_fired, ms < 1 ? 1 : (uint64_t)ms);
  if (sig != NULL) {
    lua_pushvalue(L, 2);
    s->signal_ref = luaL_ref(L, LUA_REGISTRYINDEX);
    sb_abort_listen(sig, &s->on_abort, sleeper_aborted);
  }
  return sb_task_yield(L);
}

/* ---- core.every(ms, fn, until): fn() on the loop every ms until the signal `until` fires ---- */

/* What a task waiting in a loop of core.sleep does, without the task: a waiting walled request's
 * heartbeat was a coroutine of its own (~1 KiB of stack and state each, 2,000 of them at issue
 * 43's 2,000 threads); a ticker is its timer and two references. fn runs outside any task (it
 * cannot yield); an error it raises is logged and the ticks go on. */
typedef struct ticker {
  uv_timer_t timer;
  sb_abort_listener on_abort;
  int fn_ref, signal_ref;
  struct ticker *prev, *next; /* the live list, for shutdown */
} ticker;

static ticker *tickers; /* tickers whose timer is not closing yet */

static void ticker_closed(uv_handle_t *h) { free(h->data); }

static void ticker_end(ticker *t) {
  SB_LIST_REMOVE(tickers, t);
  sb_abort_unlisten(&t->on_abort);
  uv_timer_stop(&t->timer);
  lua_State *L = sb_main_state();
  luaL_unref(L, LUA_REGISTRYINDEX, t->fn_ref);
  luaL_unref(L, LUA_REGISTRYINDEX, t->signal_ref);
  uv_close((uv_handle_t *)&t->timer, ticker_closed);
}

static void ticker_fired(uv_timer_t *h) {
  ticker *t = h->data;
  lua_State *L = sb_main_state();
  lua_rawgeti(L, LUA_REGISTRYINDEX, t->fn_ref);
  sb_pcall(L, 0, "core.every"); /* (fn may fire `until`: t is freed only by the close callback) */
}

static void ticker_aborted(sb_abort_listener *l, sb_abort *sig) {
  (void)sig;
  ticker_end((ticker *)((char *)l - offsetof(ticker, on_abort)));
}

static int l_every(lua_State *L) {
  lua_Number ms = luaL_checknumber(L, 1);
  luaL_argcheck(L, ms >= 1 && ms < 1e12, 1, "an interval of at least 1 ms expected");
  luaL_checktype(L, 2, LUA_TFUNCTION);
  sb_abort *sig = sb_abort_opt(L, 3);
  luaL_argcheck(L, sig != NULL, 3, "a signal that ends the ticks expected");
  if (sb_abort_fired(sig))
    return 0;
  ticker *t = sb_calloc(L, 1, sizeof *t);
  lua_pushvalue(L, 2);
  t->fn_ref = luaL_ref(L, LUA_REGISTRYINDEX);
  lua_pushvalue(L, 3);
  t->signal_ref = luaL_ref(L, LUA_REGISTRYINDEX); /* keeps the signal alive while we listen */
  SB_LIST_PUSH(tickers, t);
  uv_timer_init(sb_loop(), &t->timer);
  t->timer.data = t;
  uv_update_time(sb_loop()); /* (as sb_timer_start: the first tick ms from now, not from the turn's start) */
  uv_timer_start(&t->timer, ticker_fired, (uint64_t)ms, (uint64_t)ms);
  sb_abort_listen(sig, &t->on_abort, ticker_aborted);
  return 0;
}

static int l_now_ms(lua_State *L) {
  lua_pushnumber(L, sb_now_ms());
  return 1;
}

static int l_wall_ms(lua_State *L) {
  struct timeval tv;
  gettimeofday(&tv, NULL);
  lua_pushnumber(L, (lua_Number)tv.tv_sec * 1000.0 + (lua_Number)tv.tv_usec / 1000.0);
  return 1;
}

/* Engine shutdown: every sleep ends unanswered (its task is dropped) and its memory is freed
 * by its close callback. */
static void timers_shutdown(void *ud) {
  (void)ud;
  while (live != NULL) {
    sleeper *s = live;
    live_remove(s);
    sb_abort_unlisten(&s->on_abort);
    luaL_unref(sb_main_state(), LUA_REGISTRYINDEX, s->signal_ref);
    uv_close((uv_handle_t *)&s->timer, sleeper_closed);
  }
  while (tickers != NULL)
    ticker_end(tickers);
}

int sb_timer_open(lua_State *L) {
  sb_shutdown_register(timers_shutdown, NULL);
  static const luaL_Reg fns[] = {
      {"sleep", l_sleep}, {"every", l_every}, {"now_ms", l_now_ms}, {"wall_ms", l_wall_ms}, {NULL, NULL}};
  luaL_setfuncs(L, fns, 0);
  return 0;
}
