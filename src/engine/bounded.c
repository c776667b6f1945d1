/* core.call_bounded(limits, fn, ...): run untrusted-but-loaded code (policy files and hooks)
 * so that it can exhaust neither memory nor the loop.
 *
 *   limits = instructions                          -- a number: the instruction budget alone
 *   limits = {instructions = n, memory_bytes = n, time_ms = n, string = t}
 *
 * - instructions: a count hook, as Redis bounds its scripts; a loop is stopped with an error
 *   naming its line.
 * - time_ms: the CPU time of the calling thread (the loop's), checked by the same hook every
 *   few hundred instructions, for instructions that each do a lot of C work (comparing two
 *   long strings, say). CPU time, not wall time: the bounded code can neither wait nor yield,
 *   so the only wall time it spends beyond its CPU time is time the kernel gave to other
 *   processes, and a valid policy must not be refused because the host is busy.
 * - memory_bytes: the bytes the call may allocate, counted by the state's allocator while the
 *   call runs, as HAProxy's hlua caps its allocator. Growth is counted and frees are not, so
 *   this also bounds the time spent building strings (("x"):rep(1e9), s = s .. s): one
 *   allocation over the cap fails before anything is copied.
 * - string: the table string values index during the call (the string metatable's __index),
 *   so the method form ("x"):rep(...) and ("x").dump reach the caller's checked functions
 *   rather than the real string library. Restored afterwards.
 *
 * Returns true, ... or false, message (message: "<file>:<line>: <why>" plus a traceback). A
 * call that yields is refused. Calls do not nest across threads; nested calls each keep and
 * restore the outer limits. */
#include "engine.h"
#include "engine_internal.h"

#include <time.h>


enum {
  HOOK_STEP = 256, /* instructions between two checks of the time budget */
};

/* The accounting allocator: forwards to the state's own allocator, and while a bounded call
 * with a memory budget runs, refuses growth past it. */
typedef struct {
  bool active;
  size_t limit, used; /* bytes */
  bool tripped;       /* an allocation was refused */
} account;

static struct {
  lua_Alloc f; /* the state's own allocator and its userdata */
  void *ud;
  account acct;
} A;

static void *counting_alloc(void *ud, void *ptr, size_t osize, size_t nsize) {
  (void)ud;
  account *a = &A.acct;
  if (a->active && nsize > 0) {
    size_t old = ptr != NULL ? osize : 0; /* for a new block osize is a type tag */
    if (nsize > old) {
      size_t grow = nsize - old;
      if (grow > a->limit - a->used) { /* Lua never asks us to fail a shrink */
        a->tripped = true;
        return NULL;
      }
      a->used += grow;
    }
  }
  return A.f(A.ud, ptr, osize, nsize);
}

void sb_bounded_install(lua_State *L) {
  if (A.f != NULL)
    return;
  A.f = lua_getallocf(L, &A.ud);
  lua_setallocf(L, counting_alloc, NULL);
}

void sb_bounded_uninstall(lua_State *L) {
  if (A.f == NULL)
    return;
  lua_setallocf(L, A.f, A.ud);
  A.f = NULL;
  A.ud = NULL;
}

/* The limits of the running bounded call (the hook finds them here). */
typedef struct {
  lua_Integer instructions, executed;
  lua_Integer time_ms; /* 0: no time budget */
  double cpu_start;    /* thread_cpu_ms() when the time budget started; < 0: not yet */
  double wall_next;    /* sb_now_ms() before which the time budget cannot be spent */
} budget;

static budget *current;

/* The calling thread's CPU time in milliseconds. Linux always has this clock. */
static double thread_cpu_ms(void) {
  struct timespec ts = {0};
  (void)clock_gettime(CLOCK_THREAD_CPUTIME_ID, &ts);
  return (double)ts.tv_sec * 1e3 + (double)ts.tv_nsec / 1e6;
}

/* Whether the CPU time budget is spent. The CPU clock is a system call (a decision's whole cost
 * is about one), so it is read rarely: at the first check, which starts the budget (the
 * instructions before it, at most HOOK_STEP, are bounded by the instruction budget), and then
 * only once the wall clock (vDSO) says the budget could be spent, since a thread's CPU time
 * never runs ahead of its wall time. */
static bool time_spent(budget *b) {
  if (b->time_ms == 0)
    return false;
  double now = sb_now_ms();
  if (b->cpu_start < 0) {
    b->cpu_start = thread_cpu_ms();
    b->wall_next = now + (double)b->time_ms;
    return false;
  }
  if (now < b->wall_next)
    return false;
  double left = (double)b->time_ms - (thread_cpu_ms() - b->cpu_start);
  if (left <= 0)
    return true;
  b->wall_next = now + left;
  return false;
}

/* Raises `why` at the line the hooked function is on (level 0: a hook runs in no frame of its
 * own, so luaL_error's level 1 would name the caller). */
static int hook_error(lua_State *L, const char *why, lua_Integer n) {
  luaL_where(L, 0);
  lua_pushfstring(L, why, n);
  lua_concat(L, 2);
  return lua_error(L);
}

static void hook(lua_State *L, lua_Debug *ar) {
  (void)ar;
  budget *b = current;
  lua_Integer step = b->instructions - b->executed < HOOK_STEP ? b->instructions - b->executed
                                                               : HOOK_STEP;
  b->executed += step;
  if (b->executed >= b->instructions)
    hook_error(L, "instruction budget exhausted", 0);
  if (time_spent(b))
    hook_error(L, "CPU time budget of %I ms exhausted", b->time_ms);
  lua_Integer left = b->instructions - b->executed;
  if (left < HOOK_STEP)
    lua_sethook(L, hook, LUA_MASKCOUNT, (int)left);
}

/* limits.<key> as a positive integer no larger than `max`, or `dflt` when absent. */
static lua_Integer limit_field(lua_State *L, const char *key, lua_Integer max, lua_Integer dflt) {
  lua_getfield(L, 1, key);
  lua_Integer v = dflt;
  if (!lua_isnil(L, -1)) {
    int isint = 0;
    v = lua_tointegerx(L, -1, &isint);
    if (!isint || v <= 0 || v > max)
      luaL_error(L, "core.call_bounded: limits.%s must be an integer in [1, %I]", key, max);
  }
  lua_pop(L, 1);
  return v;
}

/* "<file>:<line>: " of the innermost Lua function on co's stack (a memory error is raised in C,
 * so it carries no position of its own). */
static void push_where(lua_State *L, lua_State *co) {
  lua_Debug ar;
  for (int level = 0; lua_getstack(co, level, &ar); level++) {
    if (lua_getinfo(co, "Sl", &ar) && ar.currentline > 0) {
      lua_pushfstring(L, "%s:%d: ", ar.short_src, ar.currentline);
      return;
    }
  }
  lua_pushliteral(L, "");
}

static int l_call_bounded(lua_State *L) {
  budget b = {0};
  lua_Integer memory = 0;
  bool swap_string = false;
  if (lua_type(L, 1) == LUA_TTABLE) {
    b.instructions = limit_field(L, "instructions", 1000000000, 0);
    luaL_argcheck(L, b.instructions > 0, 1, "limits.instructions is required");
    memory = limit_field(L, "memory_bytes", (lua_Integer)1 << 40, 0);
    b.time_ms = limit_field(L, "time_ms", 86400000, 0);
    swap_string = lua_getfield(L, 1, "string") == LUA_TTABLE;
    if (!swap_string && !lua_isnil(L, -1))
      luaL_error(L, "core.call_bounded: limits.string must be a table");
    lua_replace(L, 1); /* slot 1: the string table or nil */
  } else {
    b.instructions = luaL_checkinteger(L, 1);
    luaL_argcheck(L, b.instructions > 0 && b.instructions <= 1000000000, 1,
                  "a positive instruction count expected");
    lua_pushnil(L);
    lua_replace(L, 1);
  }
  luaL_checktype(L, 2, LUA_TFUNCTION);
  int nargs = lua_gettop(L) - 2;
  lua_State *co = lua_newthread(L);
  lua_rotate(L, 2, 1); /* thread below fn and args, so they can move as one block */
  lua_xmove(L, co, nargs + 1);
  /* slots: 1 string table or nil, 2 the thread */

  lua_pushliteral(L, "");
  if (swap_string && !lua_getmetatable(L, -1)) /* no string library: nothing to reach */
    swap_string = false;
  lua_remove(L, swap_string ? -2 : -1);
  if (swap_string) { /* slot 3: the string metatable, 4: its own __index */
    lua_getfield(L, 3, "__index");
    lua_pushvalue(L, 1);
    lua_setfield(L, 3, "__index");
  }
  budget *outer = current;
  account saved = A.acct;
  current = &b;
  b.cpu_start = -1; /* the first hook starts the time budget */
  lua_sethook(co, hook, LUA_MASKCOUNT,
              (int)(b.instructions < HOOK_STEP ? b.instructions : HOOK_STEP));
  if (memory > 0 && A.f != NULL)
    A.acct = (account){true, (size_t)memory, 0, false};
  int nres = 0;
  int status = lua_resume(co, L, nargs, &nres);
  bool out_of_memory = status == LUA_ERRMEM && A.acct.tripped;
  /* Restore before building any answer: the message itself needs memory. */
  A.acct = saved;
  current = outer;
  if (swap_string) {
    lua_pushvalue(L, 4);
    lua_setfield(L, 3, "__index");
    lua_settop(L, 2);
  }

  if (status == LUA_OK) {
    lua_pushboolean(L, 1);
    luaL_checkstack(L, nres, "call_bounded results");
    lua_xmove(co, L, nres);
    return nres + 1;
  }
  lua_pushboolean(L, 0);
  if (status == LUA_YIELD) {
    lua_pushliteral(L, "a bounded call may not wait on anything (it yielded)");
  } else if (out_of_memory) {
    push_where(L, co);
    lua_pushfstring(L, "%smemory budget of %I bytes exhausted", lua_tostring(L, -1), memory);
    lua_remove(L, -2);
    luaL_traceback(L, co, lua_tostring(L, -1), 0);
    lua_remove(L, -2);
  } else {
    lua_xmove(co, L, 1); /* the error value */
    sb_push_traceback(L, co, 0);
    lua_remove(L, -2);
  }
  lua_resetthread(co);
  return 2;
}

/* core.bounded_charge(units) → true | false, units left, late: charges `units` instructions'
 * worth of C work that one library call is about to do (policy/loader.lua estimates it from
 * the call's worst case) against the running bounded call, before the call runs, so that no
 * single C call can take the loop past the budget: the count hook sees only Lua instructions.
 * Refused (false, what is left) when they exceed what is left, or (false, left, true) when the
 * CPU time budget is already spent; nothing is charged then. Outside a bounded call: true. */
static int l_bounded_charge(lua_State *L) {
  lua_Number units = luaL_checknumber(L, 1);
  budget *b = current;
  if (b == NULL) {
    lua_pushboolean(L, 1);
    return 1;
  }
  lua_Integer left = b->instructions - b->executed;
  bool late = b->cpu_start >= 0 && time_spent(b); /* not started: nothing to be late for */
  if (late || !(units <= (lua_Number)left)) { /* also refuses NaN */
    lua_pushboolean(L, 0);
    lua_pushinteger(L, left);
    lua_pushboolean(L, late);
    return 3;
  }
  if (units > 0)
    b->executed += (lua_Integer)units;
  lua_pushboolean(L, 1);
  return 1;
}

int sb_bounded_open(lua_State *L) {
  static const luaL_Reg fns[] = {
      {"call_bounded", l_call_bounded}, {"bounded_charge", l_bounded_charge}, {NULL, NULL}};
  luaL_setfuncs(L, fns, 0);
  return 0;
}
