/* The task scheduler: tasks, the ready queue, resumption and the protected-call path. */
#include "engine.h"
#include "engine_internal.h"
#include "../log/log.h"

#include <dirent.h>
#include <fcntl.h>
#include <linux/close_range.h>
#include <stdlib.h>
#include <string.h>
#include <sys/syscall.h>
#include <unistd.h>

/* Registry keys (addresses are unique). */
static char tasks_key;     /* table: coroutine → true while the task is alive */
static char suspended_key; /* table: coroutine → true while it waits in core.suspend */
static char joiners_key;   /* table: task → {coroutines waiting in core.join for it} */
static char ended_key;     /* weak-keyed table: task → {n, ok, values...} once it has ended with
                              something to give a join (values, or a raise) */

typedef struct {
  lua_State *task;
  int nargs;
} ready_entry;

static struct {
  uv_loop_t *loop;
  lua_State *L;           /* the main state */
  int lua_depth;          /* > 0 while Lua code runs on the C stack */
  ready_entry *ready;     /* tasks to resume on the next turn (owned) */
  size_t ready_len, ready_cap;
  uv_idle_t ready_idle;   /* runs while the ready queue is not empty */
  uv_prepare_t turn_prepare; /* just before the loop polls: a new share for inline resumes */
  uv_check_t turn_check;     /* just after it polled: the same */
  uint64_t inline_spent_ns;  /* tasks resumed in place since the last of the two (budget) */
  lua_State *main_task;   /* the task core.run waits for */
  bool main_done;
  int main_result_ref;    /* table {ok, ...} once the main task ends */
  bool stop_requested;
  bool shutting_down;     /* sb_engine_shutdown began: no task is resumed any more */
  int exit_status;        /* asked for by sb_engine_request_exit, else -1 */
} E = {.exit_status = -1};

/* The shutdown registry: called last-registered first (see engine.h). */
typedef struct {
  sb_shutdown_fn fn;
  void *ud;
} shutdown_entry;

static struct {
  shutdown_entry *entries; /* owned */
  size_t len, cap;
} R;

uv_loop_t *sb_loop(void) { return E.loop; }
lua_State *sb_main_state(void) { return E.L; }

double sb_now_ms(void) { return (double)uv_hrtime() / 1e6; }

void sb_timer_start(uv_timer_t *t, uv_timer_cb cb, uint64_t ms) {
  uv_update_time(t->loop);
  uv_timer_start(t, cb, ms, 0);
}

/* The message part of the error value at `idx` (pushed). */
const char *sb_error_text(lua_State *L, int idx) {
  idx = lua_absindex(L, idx);
  if (lua_type(L, idx) == LUA_TSTRING || lua_type(L, idx) == LUA_TNUMBER) {
    lua_pushvalue(L, idx);
    return lua_tostring(L, -1);
  }
  if (luaL_callmeta(L, idx, "__tostring")) { /* an error object's own words */
    if (lua_type(L, -1) == LUA_TSTRING)
      return lua_tostring(L, -1);
    lua_pop(L, 1);
  }
  if (lua_type(L, idx) == LUA_TTABLE) {
    if (lua_getfield(L, idx, "message") == LUA_TSTRING)
      return lua_tostring(L, -1);
    lua_pop(L, 1);
  }
  return lua_pushfstring(L, "(error object is a %s value)", luaL_typename(L, idx));
}

int sb_traceback(lua_State *L) {
  const char *msg = sb_error_text(L, 1);
  luaL_traceback(L, L, msg, 1);
  return 1;
}

void sb_push_traceback(lua_State *L, lua_State *co, int level) {
  const char *msg = sb_error_text(L, -1);
  luaL_traceback(L, co, msg, level);
  lua_remove(L, -2);
}

bool sb_pcall(lua_State *L, int nargs, const char *where) {
  int base = lua_gettop(L) - nargs;
  lua_pushcfunction(L, sb_traceback);
  lua_insert(L, base);
  E.lua_depth++;
  int status = lua_pcall(L, nargs, 0, base);
  E.lua_depth--;
  if (status != LUA_OK) {
    sb_log_error_text(where, lua_tostring(L, -1));
    lua_pop(L, 1);
  }
  lua_remove(L, base);
  return status == LUA_OK;
}

/* ---- task bookkeeping --------------------------------------------------------------------- */

static void registry_table(lua_State *L, void *key) {
  lua_rawgetp(L, LUA_REGISTRYINDEX, key);
}

static bool task_is_alive(lua_State *L, lua_State *task) {
  registry_table(L, &tasks_key);
  lua_pushthread(task);
  lua_xmove(task, L, 1);
  lua_rawget(L, -2);
  bool alive = lua_toboolean(L, -1);
  lua_pop(L, 2);
  return alive;
}

static void task_forget(lua_State *L, lua_State *task) {
  registry_table(L, &tasks_key);
  lua_pushthread(task);
  lua_xmove(task, L, 1);
  lua_pushnil(L);
  lua_rawset(L, -3);
  lua_pop(L, 1);
}

void sb_task_check(lua_State *L, const char *primitive) {
  if (!lua_isyieldable(L) || !task_is_alive(L, L))
    luaL_error(L, "%s must be called from an engine task (core.go or core.run), "
                  "not from the main chunk, a callback or a plain coroutine", primitive);
}

bool sb_task_running(lua_State *L) { return lua_isyieldable(L) && task_is_alive(L, L); }

int sb_task_yield(lua_State *L) { return lua_yield(L, 0); }

/* Stores {ok, values...} for core.run; the `nres` values are on top of L's stack. */
static void record_main_result(lua_State *L, bool ok, int nres) {
  lua_createtable(L, nres + 1, 0);
  lua_insert(L, -(nres + 1));
  int t = lua_gettop(L) - nres;
  for (int i = nres; i >= 1; i--)
    lua_rawseti(L, t, i + 1);
  lua_pushboolean(L, ok);
  lua_rawseti(L, t, 1);
  E.main_result_ref = luaL_ref(L, LUA_REGISTRYINDEX);
  E.main_done = true;
}

/* The error value and its traceback text on the top of L → the one value a raise is handed on
 * as (core.run re-raises it, core.join returns it): a string error gains the traceback; an
 * error object stays itself so callers can still read its fields — and an engine error
 * (core.error) carries its traceback as err.traceback (the first one, when it was raised
 * again), so the report of one nothing caught still says where it was raised. */
static void raise_with_traceback(lua_State *L) {
  if (lua_type(L, -2) == LUA_TSTRING) {
    lua_remove(L, -2);
    return;
  }
  if (sb_is_error(L, -2)) {
    lua_pushliteral(L, "traceback");
    if (lua_rawget(L, -3) == LUA_TNIL) {
      lua_pushliteral(L, "traceback");
      lua_pushvalue(L, -3);
      lua_rawset(L, -5);
    }
    lua_pop(L, 1);
  }
  lua_pop(L, 1);
}

static void ready_push(lua_State *task, int nargs);

static bool task_has_joiner(lua_State *L, lua_State *task) {
  registry_table(L, &joiners_key);
  lua_pushthread(task);
  lua_xmove(task, L, 1);
  bool has = lua_rawget(L, -2) != LUA_TNIL;
  lua_pop(L, 2);
  return has;
}

/* Pushes the task's end record's ok and values onto `to` (L itself or a joiner); returns how
 * many. The record is at `rec` on L. */
static int push_record(lua_State *L, int rec, lua_State *to) {
  lua_getfield(L, rec, "n");
  int n = (int)lua_tointeger(L, -1);
  lua_pop(L, 1);
  luaL_checkstack(L, n, "too many results to join");
  for (int i = 1; i <= n; i++)
    lua_rawgeti(L, rec, i);
  if (to != L)
    lua_xmove(L, to, n);
  return n;
}

/* A task other than core.run's ended: `nres` values are on top of L (its results, or the one
 * raise), `ok` says which. Each task waiting in core.join for it is woken with (ok, values...);
 * a record is kept (weakly: dropped once nothing holds the task) for a join that comes later,
 * unless the task ended quietly, which a join can tell by the task being gone. */
static void task_settle(lua_State *L, lua_State *task, bool ok, int nres) {
  if (ok && nres == 0 && !task_has_joiner(L, task))
    return;
  lua_createtable(L, nres + 1, 1);
  lua_insert(L, -(nres + 1));
  int rec = lua_gettop(L) - nres;
  for (int i = nres; i >= 1; i--)
    lua_rawseti(L, rec, i + 1);
  lua_pushboolean(L, ok);
  lua_rawseti(L, rec, 1);
  lua_pushinteger(L, nres + 1);
  lua_setfield(L, rec, "n");
  registry_table(L, &ended_key);
  lua_pushthread(task);
  lua_xmove(task, L, 1);
  lua_pushvalue(L, rec);
  lua_rawset(L, -3);
  lua_pop(L, 1);
  registry_table(L, &joiners_key);
  lua_pushthread(task);
  lua_xmove(task, L, 1);
  if (lua_rawget(L, -2) == LUA_TTABLE) {
    lua_Integer waiting = luaL_len(L, -1);
    for (lua_Integer i = 1; i <= waiting; i++) {
      lua_rawgeti(L, -1, i);
      lua_State *joiner = lua_tothread(L, -1);
      lua_pop(L, 1);
      ready_push(joiner, push_record(L, rec, joiner));
    }
  }
  lua_pop(L, 1);
  lua_pushthread(task);
  lua_xmove(task, L, 1);
  lua_pushnil(L);
  lua_rawset(L, -3);
  lua_pop(L, 2); /* joiners, the record */
}

/* Resumes `task` with the `nargs` values on its stack and settles what it did. */
static void task_resume(lua_State *task, int nargs) {
  lua_State *L = E.L;
  int nres = 0;
  E.lua_depth++;
  int status = lua_resume(task, L, nargs, &nres);
  E.lua_depth--;
  if (status == LUA_YIELD) {
    lua_pop(task, nres); /* a primitive yielded; it will complete the task later */
    return;
  }
  bool is_main = task == E.main_task;
  if (status == LUA_OK) {
    lua_xmove(task, L, nres);
    if (is_main)
      record_main_result(L, true, nres);
    else
      task_settle(L, task, true, nres);
  } else {
    lua_xmove(task, L, 1); /* the error value */
    sb_push_traceback(L, task, 0); /* the error value, then its text */
    if (!is_main && !task_has_joiner(L, task)) /* a joiner owns the raise; else it is logged */
      sb_log_error_text("task", lua_tostring(L, -1));
    raise_with_traceback(L);
    if (is_main)
      record_main_result(L, false, 1);
    else
      task_settle(L, task, false, 1);
  }
  task_forget(L, task);
  lua_resetthread(task); /* closes to-be-closed variables of a failed task */
  if (is_main)
    E.main_task = NULL;
}

static void ready_drain(uv_idle_t *idle);

#define READY_BUDGET_NS (10 * 1000 * 1000) /* the ready queue's share of one loop turn */
#define INLINE_BUDGET_NS (10 * 1000 * 1000) /* in-place resumes' share of a poll, or of the
                                               timers and callbacks between two polls */

static void ready_push(lua_State *task, int nargs) {
  if (E.ready_len == E.ready_cap) {
    size_t cap = E.ready_cap ? E.ready_cap * 2 : 64;
    ready_entry *grown = realloc(E.ready, cap * sizeof *grown);
    if (grown == NULL)
      abort(); /* out of memory with a task in hand: nothing sane to do */
    E.ready = grown;
    E.ready_cap = cap;
  }
  E.ready[E.ready_len++] = (ready_entry){task, nargs};
  if (!uv_is_active((uv_handle_t *)&E.ready_idle))
    uv_idle_start(&E.ready_idle, ready_drain);
}

static void ready_drain(uv_idle_t *idle) {
  /* Entries added while draining run on the next turn, so a task that wakes itself in a loop
   * cannot starve I/O. */
  if (E.shutting_down) {
    E.ready_len = 0;
    uv_idle_stop(idle);
    return;
  }
  size_t n = E.ready_len;
  ready_entry *batch = malloc(n * sizeof *batch);
  if (batch == NULL)
    abort();
  memcpy(batch, E.ready, n * sizeof *batch);
  memmove(E.ready, E.ready + n, (E.ready_len - n) * sizeof *batch);
  E.ready_len -= n;
  /* At most READY_BUDGET_NS of tasks per turn: a burst (hundreds of requests arriving
   * together, each a task) would otherwise hold the loop for the whole burst, and every timer —
   * every heartbeat — wait for it (issue 43). The rest go back to the queue's head, in order,
   * and run after the loop's timers and I/O. The clock is read every 8 tasks. */
  uint64_t began = uv_hrtime();
  size_t ran = 0;
  while (ran < n) {
    task_resume(batch[ran].task, batch[ran].nargs);
    ran++;
    if (ran % 8 == 0 && ran < n && uv_hrtime() - began > READY_BUDGET_NS)
      break;
  }
  if (ran < n) {
    size_t left = n - ran;
    if (E.ready_len + left > E.ready_cap) {
      ready_entry *grown = realloc(E.ready, (E.ready_len + left) * sizeof *grown);
      if (grown == NULL)
        abort();
      E.ready = grown;
      E.ready_cap = E.ready_len + left;
    }
    memmove(E.ready + left, E.ready, E.ready_len * sizeof *E.ready);
    memcpy(E.ready, batch + ran, left * sizeof *batch);
    E.ready_len += left;
  }
  free(batch);
  if (E.ready_len == 0)
    uv_idle_stop(idle);
  if (E.main_done || E.stop_requested)
    uv_stop(E.loop);
}

void sb_task_complete(lua_State *task, int nargs) {
  if (E.shutting_down) { /* the program is going away: its tasks are dropped, not resumed */
    lua_pop(task, nargs);
    return;
  }
  /* In place, unless Lua is on the C stack or this part of the loop turn has had its share:
   * one poll can hand over hundreds of completions at once (a burst of instance starts: their
   * helpers' lines, the thread pool's mkdirs, their timers), and each resumed task runs until
   * it waits again. Past INLINE_BUDGET_NS the rest wait in the ready queue, which the loop runs
   * after its timers, at READY_BUDGET_NS a turn (issue 43: the loop was on the CPU for 41-55 ms
   * stretches while 500 instances started, every heartbeat timer waiting). */
  if (E.lua_depth > 0 || E.inline_spent_ns >= INLINE_BUDGET_NS) {
    ready_push(task, nargs);
    return;
  }
  uint64_t began = uv_hrtime();
  task_resume(task, nargs);
  E.inline_spent_ns += uv_hrtime() - began;
  if (E.main_done || E.stop_requested)
    uv_stop(E.loop);
}

/* Creates a task running the function at `fidx` with the `nargs` values after it; the task
 * is queued for the next turn. Leaves the coroutine on L's stack. */
static lua_State *task_create(lua_State *L, int fidx, int nargs) {
  luaL_checktype(L, fidx, LUA_TFUNCTION);
  lua_State *task = lua_newthread(L);
  lua_pushvalue(L, fidx);
  for (int i = 1; i <= nargs; i++)
    lua_pushvalue(L, fidx + i);
  lua_xmove(L, task, nargs + 1);
  registry_table(L, &tasks_key);
  lua_pushvalue(L, -2);
  lua_pushboolean(L, 1);
  lua_rawset(L, -3);
  lua_pop(L, 1);
  ready_push(task, nargs);
  return task;
}

/* ---- Lua API -------------------------------------------------------------------------------- */

static int l_go(lua_State *L) {
  task_create(L, 1, lua_gettop(L) - 1);
  return 1;
}

static int l_current(lua_State *L) {
  if (lua_isyieldable(L) && task_is_alive(L, L))
    lua_pushthread(L);
  else
    lua_pushnil(L);
  return 1;
}

static int l_suspend(lua_State *L) {
  sb_task_check(L, "core.suspend");
  registry_table(L, &suspended_key);
  lua_pushthread(L);
  lua_pushboolean(L, 1);
  lua_rawset(L, -3);
  lua_pop(L, 1);
  return sb_task_yield(L);
}

static int l_wake(lua_State *L) {
  lua_State *task = lua_tothread(L, 1);
  luaL_argcheck(L, task != NULL, 1, "a task expected");
  registry_table(L, &suspended_key);
  lua_pushvalue(L, 1);
  lua_rawget(L, -2);
  if (!lua_toboolean(L, -1))
    return luaL_error(L, "core.wake: the task is not suspended in core.suspend");
  lua_pop(L, 1);
  lua_pushvalue(L, 1);
  lua_pushnil(L);
  lua_rawset(L, -3);
  lua_pop(L, 1);
  int nargs = lua_gettop(L) - 1;
  lua_xmove(L, task, nargs);
  ready_push(task, nargs);
  return 0;
}

/* core.join(task) → true, its results | false, its raise (with its traceback, as core.run
 * raises it). Waits while the task runs; a task that has already ended answers at once. The
 * raise of a task someone waits for is theirs: it is not logged. */
static int l_join(lua_State *L) {
  sb_task_check(L, "core.join");
  lua_State *task = lua_tothread(L, 1);
  luaL_argcheck(L, task != NULL, 1, "a task (from core.go) expected");
  if (task == L)
    return luaL_error(L, "core.join: a task cannot wait for itself");
  lua_settop(L, 1);
  registry_table(L, &ended_key);
  lua_pushvalue(L, 1);
  if (lua_rawget(L, -2) == LUA_TTABLE)
    return push_record(L, lua_gettop(L), L);
  lua_settop(L, 1);
  if (!task_is_alive(L, task)) { /* it ended with nothing to say */
    lua_pushboolean(L, 1);
    return 1;
  }
  registry_table(L, &joiners_key);
  lua_pushvalue(L, 1);
  if (lua_rawget(L, -2) != LUA_TTABLE) {
    lua_pop(L, 1);
    lua_newtable(L);
    lua_pushvalue(L, 1);
    lua_pushvalue(L, -2);
    lua_rawset(L, -4);
  }
  lua_pushthread(L);
  lua_rawseti(L, -2, luaL_len(L, -2) + 1);
  lua_settop(L, 0);
  return sb_task_yield(L); /* task_settle resumes it with (ok, values...) */
}

static int l_stop(lua_State *L) {
  (void)L;
  E.stop_requested = true;
  uv_stop(E.loop);
  return 0;
}

static int l_run(lua_State *L) {
  if (E.main_task != NULL)
    return luaL_error(L, "core.run cannot be nested");
  E.main_done = false;
  E.stop_requested = false;
  E.main_task = task_create(L, 1, lua_gettop(L) - 1);
  while (!E.main_done && !E.stop_requested) {
    if (uv_run(E.loop, UV_RUN_DEFAULT) == 0 && !E.main_done && E.ready_len == 0)
      break; /* nothing left that could ever wake the main task */
  }
  if (!E.main_done) {
    lua_State *stuck = E.main_task;
    E.main_task = NULL;
    if (E.stop_requested)
      return 0;
    (void)stuck;
    return luaL_error(L, "core.run: the main task is waiting on something that can never "
                         "complete (a core.suspend with no wake?)");
  }
  lua_rawgeti(L, LUA_REGISTRYINDEX, E.main_result_ref);
  luaL_unref(L, LUA_REGISTRYINDEX, E.main_result_ref);
  int t = lua_gettop(L);
  lua_Integer n = luaL_len(L, t);
  lua_rawgeti(L, t, 1);
  bool ok = lua_toboolean(L, -1);
  lua_pop(L, 1);
  if (!ok) {
    lua_rawgeti(L, t, 2);
    return lua_error(L);
  }
  for (lua_Integer i = 2; i <= n; i++)
    lua_rawgeti(L, t, i);
  return (int)(n - 1);
}

int sb_tasks_open(lua_State *L) {
  static const luaL_Reg fns[] = {
      {"run", l_run},         {"go", l_go},     {"current", l_current},
      {"suspend", l_suspend}, {"wake", l_wake}, {"stop", l_stop},
      {"join", l_join},
      {NULL, NULL},
  };
  luaL_setfuncs(L, fns, 0);
  return 0;
}

/* ---- lifetime ------------------------------------------------------------------------------- */

/* Descriptors inherited from whoever started us must not reach our children either: libuv
 * opens its own with O_CLOEXEC, and everything already open is marked here. */
static void mark_inherited_cloexec(void) {
  if (syscall(SYS_close_range, 3U, ~0U, CLOSE_RANGE_CLOEXEC) == 0)
    return;
  DIR *d = opendir("/proc/self/fd");
  if (d == NULL)
    return;
  for (struct dirent *e; (e = readdir(d)) != NULL;) {
    int fd = atoi(e->d_name);
    if (fd > 2 && fd != dirfd(d))
      fcntl(fd, F_SETFD, fcntl(fd, F_GETFD) | FD_CLOEXEC);
  }
  closedir(d);
}

/* The in-place resumes' share (sb_task_complete) is renewed twice a loop turn: once for the
 * I/O callbacks of a poll, once for the timers and callbacks between two polls.
 *
 * Before the poll the loop's clock is also read anew: libuv (1.44) reads it once at the turn's
 * start and sizes the poll's timeout from that reading, so the turn's timers, pending callbacks
 * and ready queue (up to ~20 ms of tasks by the budgets below) would be slept again on top of
 * the next timer's due time — every heartbeat late by as much as the turn before it worked
 * (issue 43: the 2,000-thread loop asleep in epoll_wait 16-20 ms past a due timer). */
static void turn_share_renewed_before_poll(uv_prepare_t *h) {
  E.inline_spent_ns = 0;
  uv_update_time(h->loop);
}

static void turn_share_renewed_after_poll(uv_check_t *h) {
  (void)h;
  E.inline_spent_ns = 0;
}

bool sb_engine_init(lua_State *L) {
  if (E.L != NULL)
    return E.L == L;
  mark_inherited_cloexec();
  E.L = L;
  sb_bounded_install(L);
  E.loop = uv_default_loop();
  sb_gc_pace_start(L, E.loop);
  uv_idle_init(E.loop, &E.ready_idle); /* active (and so keeping the loop alive) only while
                                          tasks wait in the ready queue */
  /* Unreferenced (they never keep the loop alive); closed by the shutdown's walk. */
  uv_prepare_init(E.loop, &E.turn_prepare);
  uv_unref((uv_handle_t *)&E.turn_prepare);
  uv_prepare_start(&E.turn_prepare, turn_share_renewed_before_poll);
  uv_check_init(E.loop, &E.turn_check);
  uv_unref((uv_handle_t *)&E.turn_check);
  uv_check_start(&E.turn_check, turn_share_renewed_after_poll);
  lua_newtable(L);
  lua_rawsetp(L, LUA_REGISTRYINDEX, &tasks_key);
  sb_push_weak_table(L, "k");
  lua_rawsetp(L, LUA_REGISTRYINDEX, &suspended_key);
  lua_newtable(L);
  lua_rawsetp(L, LUA_REGISTRYINDEX, &joiners_key);
  sb_push_weak_table(L, "k");
  lua_rawsetp(L, LUA_REGISTRYINDEX, &ended_key);
  return true;
}

int sb_engine_open(lua_State *L) {
  static int (*const openers[])(lua_State *) = {
      sb_tasks_open,      sb_timer_open, sb_abort_open, sb_bounded_open,
      sb_os_signals_open, sb_error_open, sb_build_open, sb_loop_lag_open,
      sb_log_batch_open,
  };
  for (size_t i = 0; i < sizeof openers / sizeof openers[0]; i++)
    openers[i](L);
  return 0;
}

bool sb_shutdown_register(sb_shutdown_fn fn, void *ud) {
  if (E.shutting_down)
    return false;
  if (R.len == R.cap) {
    size_t cap = R.cap ? R.cap * 2 : 16;
    shutdown_entry *grown = realloc(R.entries, cap * sizeof *grown);
    if (grown == NULL)
      return false;
    R.entries = grown;
    R.cap = cap;
  }
  R.entries[R.len++] = (shutdown_entry){fn, ud};
  return true;
}

void sb_shutdown_unregister(sb_shutdown_fn fn, void *ud) {
  for (size_t i = R.len; i-- > 0;) {
    if (R.entries[i].fn == fn && R.entries[i].ud == ud) {
      memmove(R.entries + i, R.entries + i + 1, (R.len - i - 1) * sizeof *R.entries);
      R.len--;
      return;
    }
  }
}

void sb_engine_request_exit(int status) {
  E.exit_status = status;
  E.stop_requested = true;
  uv_stop(E.loop);
}

int sb_engine_exit_status(void) { return E.exit_status; }

/* What no module registered for (the engine's own idle handle, the signal watchers, stdin:
 * static storage, nothing to free) is closed here. */
static void close_walk(uv_handle_t *handle, void *arg) {
  (void)arg;
  if (!uv_is_closing(handle))
    uv_close(handle, NULL);
}

void sb_engine_shutdown(void) {
  if (E.loop == NULL || E.shutting_down)
    return;
  E.shutting_down = true;
  /* Last registered first; a callback may unregister itself or others as it goes. */
  while (R.len > 0) {
    shutdown_entry e = R.entries[--R.len];
    e.fn(e.ud);
  }
  free(R.entries);
  R.entries = NULL;
  R.cap = 0;
  uv_walk(E.loop, close_walk, NULL);
  uv_run(E.loop, UV_RUN_DEFAULT); /* every close callback runs */
  uv_loop_close(E.loop);
  sb_bounded_uninstall(E.L);
  free(E.ready);
  E.ready = NULL;
  E.ready_len = E.ready_cap = 0;
  E.loop = NULL;
}
