/* Abort signals: core.signal([parent, ...]), sig:abort(reason), sig:on_abort(fn),
 * sig.aborted, sig.reason. A signal aborts when told to or when any parent aborts; C waiters
 * attach intrusive listeners, so aborting never allocates. */
#include "engine.h"
#include "engine_internal.h"

#include <stddef.h>
#include <stdlib.h>
#include <string.h>

#define SIGNAL_MT "switchboard.signal"

/* How a parent aborts a child: the child's link in the parent's listener list. */
typedef struct {
  sb_abort_listener link;
  sb_abort *child;
} parent_link;

struct sb_abort {
  bool fired;
  int reason_ref;               /* registry ref of the reason, LUA_NOREF before */
  sb_abort_listener head;       /* sentinel of the listeners attached to this signal */
  int n_parents;
  parent_link parents[];        /* one link per parent */
};

/* uservalue 1: the Lua on_abort functions — nil (none), the one function, or an array of them;
 * uservalue 2: the parents (kept alive), nil when there are none. Both are made only when
 * needed: a server holds thousands of signals at once (eight per walled request waiting at
 * 2,000 threads, issue 43's RSS row), most with no Lua listener and no parent, and two empty
 * tables each were ~130 bytes of a signal's ~260. */

static void list_init(sb_abort_listener *head) { head->prev = head->next = head; }

void sb_abort_listen(sb_abort *sig, sb_abort_listener *l, sb_abort_fn fn) {
  l->fn = fn;
  if (sig->fired) {
    l->owner = NULL;
    l->prev = l->next = NULL;
    fn(l, sig);
    return;
  }
  l->owner = sig;
  l->next = &sig->head;
  l->prev = sig->head.prev;
  sig->head.prev->next = l;
  sig->head.prev = l;
}

void sb_abort_unlisten(sb_abort_listener *l) {
  if (l->owner == NULL)
    return;
  l->prev->next = l->next;
  l->next->prev = l->prev;
  l->owner = NULL;
  l->prev = l->next = NULL;
}

bool sb_abort_fired(const sb_abort *sig) { return sig->fired; }

sb_abort *sb_abort_opt(lua_State *L, int idx) {
  if (lua_isnoneornil(L, idx))
    return NULL;
  return luaL_checkudata(L, idx, SIGNAL_MT);
}

static void push_reason(lua_State *L, sb_abort *sig) {
  if (sig->reason_ref == LUA_NOREF)
    lua_pushnil(L);
  else
    lua_rawgeti(L, LUA_REGISTRYINDEX, sig->reason_ref);
}

int sb_abort_push_fail(lua_State *L, sb_abort *sig) {
  lua_pushnil(L);
  push_reason(L, sig);
  sb_error_push(L, "aborted", lua_type(L, -1) == LUA_TSTRING ? lua_tostring(L, -1) : "stopped");
  lua_insert(L, -2);
  lua_setfield(L, -2, "reason");
  return 2;
}

static void run_lua_listeners(lua_State *L, int sig_idx, sb_abort *sig) {
  int kind = lua_getiuservalue(L, sig_idx, 1);
  int list = lua_gettop(L);
  if (kind == LUA_TFUNCTION) {
    lua_pushnil(L); /* listeners run once */
    lua_setiuservalue(L, sig_idx, 1);
    push_reason(L, sig);
    sb_pcall(L, 1, "signal.on_abort");
    return;
  }
  if (kind == LUA_TTABLE) {
    lua_pushnil(L); /* listeners run once */
    lua_setiuservalue(L, sig_idx, 1);
    lua_Integer n = luaL_len(L, list);
    for (lua_Integer i = 1; i <= n; i++) {
      lua_rawgeti(L, list, i);
      push_reason(L, sig);
      sb_pcall(L, 1, "signal.on_abort");
    }
  }
  lua_pop(L, 1);
}

/* Fires `sig` (the userdata at `sig_idx` of L) with the reason on top of L's stack (popped). */
static void fire(lua_State *L, int sig_idx, sb_abort *sig) {
  sig_idx = lua_absindex(L, sig_idx);
  if (sig->fired) {
    lua_pop(L, 1);
    return;
  }
  sig->fired = true;
  sig->reason_ref = luaL_ref(L, LUA_REGISTRYINDEX);
  for (int i = 0; i < sig->n_parents; i++)
    sb_abort_unlisten(&sig->parents[i].link);
  while (sig->head.next != &sig->head) {
    sb_abort_listener *l = sig->head.next;
    sb_abort_unlisten(l);
    l->fn(l, sig);
  }
  run_lua_listeners(L, sig_idx, sig);
}

static char children_key; /* weak-valued table: light userdata (child) → child userdata */

/* A parent fired: fire the child with the parent's reason. */
static void parent_fired(sb_abort_listener *l, sb_abort *parent) {
  lua_State *L = sb_main_state();
  sb_abort *child = ((parent_link *)((char *)l - offsetof(parent_link, link)))->child;
  lua_rawgetp(L, LUA_REGISTRYINDEX, &children_key);
  lua_rawgetp(L, -1, child);
  if (lua_touserdata(L, -1) != child) { /* being collected */
    lua_pop(L, 2);
    return;
  }
  push_reason(L, parent);
  fire(L, -2, child);
  lua_pop(L, 2);
}

static int l_signal(lua_State *L) {
  int n = lua_gettop(L);
  for (int i = 1; i <= n; i++)
    luaL_checkudata(L, i, SIGNAL_MT);
  sb_abort *sig = lua_newuserdatauv(L, sizeof *sig + (size_t)n * sizeof(parent_link), 2);
  int idx = lua_gettop(L);
  sig->fired = false;
  sig->reason_ref = LUA_NOREF;
  sig->n_parents = 0;
  list_init(&sig->head);
  luaL_setmetatable(L, SIGNAL_MT);
  if (n > 0) {
    lua_createtable(L, n, 0);
    for (int i = 1; i <= n; i++) {
      lua_pushvalue(L, i);
      lua_rawseti(L, -2, i);
    }
    lua_setiuservalue(L, idx, 2);
    lua_rawgetp(L, LUA_REGISTRYINDEX, &children_key);
    lua_pushlightuserdata(L, sig);
    lua_pushvalue(L, idx);
    lua_rawset(L, -3);
    lua_pop(L, 1);
  }
  for (int i = 1; i <= n; i++) {
    sb_abort *parent = lua_touserdata(L, i);
    sig->parents[i - 1].link.owner = NULL;
    sig->parents[i - 1].child = sig;
    sig->n_parents = i;
    if (parent->fired) {
      push_reason(L, parent);
      fire(L, idx, sig);
      break;
    }
    sb_abort_listen(parent, &sig->parents[i - 1].link, parent_fired);
  }
  lua_settop(L, idx);
  return 1;
}

static int l_abort(lua_State *L) {
  sb_abort *sig = luaL_checkudata(L, 1, SIGNAL_MT);
  if (lua_isnoneornil(L, 2))
    lua_pushliteral(L, "aborted");
  else
    lua_pushvalue(L, 2);
  fire(L, 1, sig);
  return 0;
}

static int l_on_abort(lua_State *L) {
  sb_abort *sig = luaL_checkudata(L, 1, SIGNAL_MT);
  luaL_checktype(L, 2, LUA_TFUNCTION);
  if (sig->fired) {
    lua_pushvalue(L, 2);
    push_reason(L, sig);
    sb_pcall(L, 1, "signal.on_abort");
    return 0;
  }
  int kind = lua_getiuservalue(L, 1, 1);
  if (kind == LUA_TNIL) { /* the first listener: the function itself */
    lua_pushvalue(L, 2);
    lua_setiuservalue(L, 1, 1);
    return 0;
  }
  if (kind == LUA_TFUNCTION) { /* the second: both in an array, in the order they came */
    lua_createtable(L, 2, 0);
    lua_insert(L, -2);
    lua_rawseti(L, -2, 1);
    lua_pushvalue(L, -1);
    lua_setiuservalue(L, 1, 1);
  }
  lua_pushvalue(L, 2);
  lua_rawseti(L, -2, luaL_len(L, -2) + 1);
  return 0;
}

static int l_aborted(lua_State *L) {
  lua_pushboolean(L, ((sb_abort *)luaL_checkudata(L, 1, SIGNAL_MT))->fired);
  return 1;
}

static int l_reason(lua_State *L) {
  push_reason(L, luaL_checkudata(L, 1, SIGNAL_MT));
  return 1;
}

static int l_gc(lua_State *L) {
  sb_abort *sig = luaL_checkudata(L, 1, SIGNAL_MT);
  for (int i = 0; i < sig->n_parents; i++)
    sb_abort_unlisten(&sig->parents[i].link);
  /* Waiters hold a reference to the signal, so none can remain attached; detach defensively. */
  while (sig->head.next != &sig->head)
    sb_abort_unlisten(sig->head.next);
  luaL_unref(L, LUA_REGISTRYINDEX, sig->reason_ref);
  sig->reason_ref = LUA_NOREF;
  return 0;
}

static int l_tostring(lua_State *L) {
  sb_abort *sig = luaL_checkudata(L, 1, SIGNAL_MT);
  lua_pushfstring(L, "signal(%s)", sig->fired ? "aborted" : "armed");
  return 1;
}

int sb_abort_open(lua_State *L) {
  static const luaL_Reg methods[] = {{"abort", l_abort}, {"on_abort", l_on_abort}, {NULL, NULL}};
  static const luaL_Reg fields[] = {{"aborted", l_aborted}, {"reason", l_reason}, {NULL, NULL}};
  static const luaL_Reg meta[] = {{"__gc", l_gc}, {"__tostring", l_tostring}, {NULL, NULL}};
  sb_class_register(L, &(sb_class){SIGNAL_MT, methods, fields, meta});
  sb_push_weak_table(L, "v");
  lua_rawsetp(L, LUA_REGISTRYINDEX, &children_key);
  lua_pushcfunction(L, l_signal);
  lua_setfield(L, -2, "signal");
  return 0;
}
