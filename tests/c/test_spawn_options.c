/* core.spawn refuses each malformed option by raising, and a raise or a spawn failure leaves
 * nothing behind: no descriptor (counted here) and no heap block (LeakSanitizer checks at exit
 * in the sanitized build, where ctest runs this with leak detection on). Options are read
 * after argv and env on purpose: those were the ones allocated before a later option raised. */
#include "core/core.h"

#include <dirent.h>
#include <lauxlib.h>
#include <lualib.h>
#include <stdbool.h>
#include <stdio.h>
#include <string.h>
#include <unistd.h>

/* Names what is open, for a failure message. */
static void list_fds(void) {
  DIR *d = opendir("/proc/self/fd");
  if (d == NULL)
    return;
  for (struct dirent *e; (e = readdir(d)) != NULL;) {
    char path[300], target[256];
    snprintf(path, sizeof path, "/proc/self/fd/%s", e->d_name);
    ssize_t n = readlink(path, target, sizeof target - 1);
    if (e->d_name[0] != '.' && n > 0)
      fprintf(stderr, "  fd %s -> %.*s\n", e->d_name, (int)n, target);
  }
  closedir(d);
}

static int count_fds(void) {
  int n = 0;
  DIR *d = opendir("/proc/self/fd");
  if (d == NULL)
    return -1;
  for (struct dirent *e; (e = readdir(d)) != NULL;)
    n += e->d_name[0] != '.';
  closedir(d);
  return n;
}

/* Each chunk gets `core` and must raise from core.spawn. */
static const char *const raising[] = {
    "core.spawn{argv = {'true', 'x'}, env = {A = 'b', C = 'd'}, deadline_ms = 'soon'}",
    "core.spawn{argv = {'true', 'x'}, env = {A = 'b'}, deadline_ms = -1}",
    "core.spawn{argv = {'true', 'x'}, env = {A = 'b'}, kill_grace_ms = {}}",
    "core.spawn{argv = {'true', 'x'}, env = {A = 'b'}, max_output = 'lots'}",
    "core.spawn{argv = {'true', 'x'}, env = {A = 'b'}, signal = 'stop'}",
    "core.spawn{argv = {'true', 'x'}, env = {A = 'b'}, stdin = 42}",
    "core.spawn{argv = {'true', 'x'}, env = {A = 'b'}, on_output = 'print'}",
    "core.spawn{argv = {'true', 'x'}, env = {A = 'b'}, cwd = {}}",
    "core.spawn{argv = {'true', 'x'}, env = {A = 'b', [1] = 'positional'}}",
    "core.spawn{argv = {'true', 'x'}, env = {A = 'b', ['B=C'] = 'd'}}",
    "core.spawn{argv = {'true', 'x'}, env = {A = 'b', B = 'nul\\0byte'}}",
    "core.spawn{argv = {'true', 'x'}, env = 'PATH=/bin'}",
    "core.spawn{argv = {'true', 'nul\\0byte'}, env = {A = 'b'}}",
    "core.spawn{argv = {'true', {}}, env = {A = 'b'}}",
    "core.spawn{argv = {}, env = {A = 'b'}}",
    "core.spawn{env = {A = 'b'}}",
    "core.spawn('true')",
};

/* Each chunk must return nil, err (a failure value, not a raise). */
static const char *const failing[] = {
    "return core.spawn{argv = {'/nonexistent/program'}, env = {A = 'b'}}",
    "return core.spawn{argv = {'no-such-program-here'}, env = {PATH = '/nonexistent:/also/not'}}",
    "return core.spawn{argv = {'true'}, env = {PATH = '/usr/bin:/bin'}, cwd = '/nonexistent/dir', stdin = 'x'}",
};

static int failures;

static void expect(bool ok, const char *what, const char *chunk, const char *detail) {
  if (!ok) {
    fprintf(stderr, "FAIL %s: %s (%s)\n", what, chunk, detail != NULL ? detail : "");
    failures++;
    list_fds();
  }
}

int main(void) {
  int fds_before = count_fds();
  lua_State *L = luaL_newstate();
  luaL_openlibs(L);
  luaL_requiref(L, "switchboard.core", luaopen_switchboard_core, 0);
  lua_setglobal(L, "core");
  int fds_opened = count_fds(); /* the engine's own (the loop's epoll and friends) */

  for (size_t i = 0; i < sizeof raising / sizeof raising[0]; i++) {
    int status = luaL_loadstring(L, raising[i]);
    expect(status == LUA_OK, "load", raising[i], lua_tostring(L, -1));
    if (status == LUA_OK)
      status = lua_pcall(L, 0, 0, 0);
    expect(status == LUA_ERRRUN, "raise", raising[i], "core.spawn did not raise");
    lua_settop(L, 0);
    lua_gc(L, LUA_GCCOLLECT);
    expect(count_fds() == fds_opened, "descriptors", raising[i], "a descriptor leaked");
  }
  for (size_t i = 0; i < sizeof failing / sizeof failing[0]; i++) {
    int status = luaL_loadstring(L, failing[i]);
    if (status == LUA_OK)
      status = lua_pcall(L, 0, 2, 0);
    expect(status == LUA_OK && lua_isnil(L, -2) && lua_istable(L, -1), "nil, err", failing[i],
           status != LUA_OK ? lua_tostring(L, -1) : "not a failure pair");
    lua_settop(L, 0);
    lua_gc(L, LUA_GCCOLLECT);
    expect(count_fds() == fds_opened, "descriptors", failing[i], "a descriptor leaked");
  }
  lua_close(L);
  /* libuv keeps one process-wide pipe pair (its signal lock) past the loop's life; the loop's
   * own descriptors are closed by the shutdown. */
  expect(count_fds() <= fds_before + 2 && count_fds() < fds_opened, "descriptors", "lua_close",
         "the engine left one open");
  if (failures == 0)
    printf("ok: %zu raising and %zu failing spawns, nothing left behind\n",
           sizeof raising / sizeof raising[0], sizeof failing / sizeof failing[0]);
  return failures == 0 ? 0 : 1;
}
