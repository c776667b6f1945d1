/* core.call_bounded(budget, fn, ...): run untrusted-but-loaded code (policy hooks) under an
 * instruction budget, the way Redis bounds scripts with a count hook. A hook that loops is
 * stopped with an error naming its line; a hook that yields is refused. */
#include "engine.h"
#include "engine_internal.h"

static void budget_exhausted(lua_State *L, lua_Debug *ar) {
  (void)ar;
  luaL_error(L, "instruction budget exhausted");
}

static int l_call_bounded(lua_State *L) {
  lua_Integer budget = luaL_checkinteger(L, 1);
  luaL_argcheck(L, budget > 0 && budget <= 1000000000, 1, "a positive instruction count expected");
  luaL_checktype(L, 2, LUA_TFUNCTION);
  int nargs = lua_gettop(L) - 2;
  lua_State *co = lua_newthread(L);
  lua_rotate(L, 2, 1); /* thread below fn and args, so they can move as one block */
  lua_xmove(L, co, nargs + 1);
  lua_sethook(co, budget_exhausted, LUA_MASKCOUNT, (int)budget);
  int nres = 0;
  int status = lua_resume(co, L, nargs, &nres);
  if (status == LUA_OK) {
    lua_pushboolean(L, 1);
    luaL_checkstack(L, nres, "call_bounded results");
    lua_xmove(co, L, nres);
    return nres + 1;
  }
  lua_pushboolean(L, 0);
  if (status == LUA_YIELD) {
    lua_pushliteral(L, "a bounded call may not wait on anything (it yielded)");
  } else {
    lua_xmove(co, L, 1); /* the error value */
    sb_push_traceback(L, co, 0);
    lua_remove(L, -2);
  }
  lua_resetthread(co);
  return 2;
}

int sb_bounded_open(lua_State *L) {
  lua_pushcfunction(L, l_call_bounded);
  lua_setfield(L, -2, "call_bounded");
  return 0;
}
