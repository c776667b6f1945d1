/* luaopen_switchboard_core: assembles the module table from the engine (the ground floor) and
 * the feature modules above it. This is the only file that knows them all; the engine knows
 * none of them, and each module declares its own opener in its own header. The binary
 * registers this in package.preload; the same object code is built as core.so for busted. */
#include "core.h"

#include "../crypto/crypto.h"
#include "../engine/engine.h"
#include "../fs/fs.h"
#include "../http/http.h"
#include "../io/io.h"
#include "../json/json.h"
#include "../lane/exec_lane.h"
#include "../log/log_lua.h"
#include "../notify/notify.h"
#include "../proc/filerefs.h"
#include "../proc/loop_devices.h"
#include "../proc/pidwatch.h"
#include "../proc/proc.h"
#include "../secrets/secrets.h"
#include "../sse/sse_lua.h"
#include "../store/store.h"
#include "../ws/ws.h"

/* Each sets its fields on the table at the top of the stack; order only matters for the
 * shutdown registry (modules registered later are shut down first). */
static int (*const openers[])(lua_State *) = {
    sb_engine_open,      sb_log_open,         sb_proc_open, sb_http_client_open,
    sb_http_server_open, sb_crypto_open,      sb_fs_open,   sb_stdin_open,
    sb_ws_open,          sb_secrets_open,     sb_sse_open,         sb_notify_open,
    sb_tty_open,         sb_json_open,        sb_store_open,       sb_filerefs_open,
    sb_pidwatch_open,    sb_exec_lane_open,   sb_loop_devices_open,
};

static char finalizer_key;

/* When a plain `lua` (busted) closes its state, the engine shuts down: the shutdown registry
 * decides the order, so this is the module's only finalizer. */
static int engine_finalizer(lua_State *L) {
  (void)L;
  sb_engine_shutdown();
  return 0;
}

static void install_finalizer(lua_State *L) {
  static const luaL_Reg meta[] = {{"__gc", engine_finalizer}, {NULL, NULL}};
  sb_class_register(L, &(sb_class){"switchboard.core.finalizer", NULL, NULL, meta});
  lua_newuserdatauv(L, 1, 0);
  luaL_setmetatable(L, "switchboard.core.finalizer");
  lua_rawsetp(L, LUA_REGISTRYINDEX, &finalizer_key);
}

int luaopen_switchboard_core(lua_State *L) {
  lua_getfield(L, LUA_REGISTRYINDEX, "switchboard.core");
  if (lua_istable(L, -1))
    return 1;
  lua_pop(L, 1);
  lua_rawgeti(L, LUA_REGISTRYINDEX, LUA_RIDX_MAINTHREAD);
  lua_State *main = lua_tothread(L, -1);
  lua_pop(L, 1);
  if (!sb_engine_init(main))
    return luaL_error(L, "switchboard.core is already bound to another Lua state");
  install_finalizer(L);
  lua_newtable(L);
  for (size_t i = 0; i < sizeof openers / sizeof openers[0]; i++)
    openers[i](L);
  lua_pushvalue(L, -1);
  lua_setfield(L, LUA_REGISTRYINDEX, "switchboard.core");
  return 1;
}
