/* The shutdown registry, end to end: an engine stopped with a sleeper (with and without an
 * abort signal), a supervised child with its pipes, a listening server whose handler is still
 * running and an HTTP request in flight to it. Torn down the way the binary does
 * (sb_engine_shutdown after core.run returned, then lua_close) and, in a forked process, the
 * way a plain `lua` does (lua_close alone: the module's finalizer shuts down). Either way the
 * child is killed and reaped, no descriptor of the loop is left, and — in the sanitized build,
 * where ctest runs this with leak detection on — LeakSanitizer finds nothing at exit. */
#include "core/core.h"
#include "engine/engine.h"

#include <dirent.h>
#include <errno.h>
#include <lualib.h>
#include <signal.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <sys/wait.h>
#include <unistd.h>

static const char scenario[] =
    "local core = require('switchboard.core')\n"
    "local pid\n"
    "core.run(function()\n"
    "  core.go(function() core.sleep(60000, core.signal()) end)\n"
    "  core.go(function() core.sleep(60000) end)\n"
    "  local child = assert(core.spawn{argv = {'sleep', '60'}, env = {PATH = '/usr/bin:/bin'},\n"
    "    deadline_ms = 60000, stdin = 'x', on_output = function() end})\n"
    "  pid = child.pid\n"
    "  core.go(function() child:wait() end)\n"
    "  local reached = core.signal()\n"
    "  local srv = assert(core.http.serve{port = 0, handler = function()\n"
    "    reached:abort('reached'); core.sleep(60000) end})\n"
    "  core.go(function()\n"
    "    core.http.request{url = 'http://127.0.0.1:' .. srv.port .. '/', deadline_ms = 60000}\n"
    "  end)\n"
    "  core.sleep(30000, reached)\n"
    "  assert(reached.aborted, 'the request never reached the handler')\n"
    "  core.stop()\n"
    "end)\n"
    "return pid\n";

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

/* Runs the scenario; returns 0 when everything was torn down. */
static int run(bool module) {
  const char *mode = module ? "module" : "binary";
  int fds_before = count_fds();
  lua_State *L = luaL_newstate();
  luaL_openlibs(L);
  luaL_getsubtable(L, LUA_REGISTRYINDEX, LUA_PRELOAD_TABLE);
  lua_pushcfunction(L, luaopen_switchboard_core);
  lua_setfield(L, -2, "switchboard.core");
  lua_pop(L, 1);
  int status = luaL_loadstring(L, scenario);
  if (status == LUA_OK)
    status = lua_pcall(L, 0, 1, 0);
  if (status != LUA_OK) {
    fprintf(stderr, "FAIL %s: %s\n", mode, lua_tostring(L, -1));
    lua_close(L);
    return 1;
  }
  pid_t pid = (pid_t)lua_tointeger(L, -1);
  lua_pop(L, 1);
  if (!module)
    sb_engine_shutdown();
  lua_close(L);
  int failures = 0;
  /* Reaped: the pid is gone, not a zombie of ours. */
  if (pid <= 0 || kill(pid, 0) == 0 || errno != ESRCH) {
    fprintf(stderr, "FAIL %s: the child %d was not killed and reaped\n", mode, (int)pid);
    failures++;
  }
  /* libuv keeps one process-wide pipe pair (its signal lock) past the loop's life. */
  if (count_fds() > fds_before + 2) {
    fprintf(stderr, "FAIL %s: %d descriptors before, %d after\n", mode, fds_before, count_fds());
    failures++;
  }
  if (failures == 0)
    printf("ok: %s teardown\n", mode);
  return failures;
}

int main(void) {
  fflush(stdout);
  pid_t child = fork(); /* one engine per process: the module way runs in a child */
  if (child < 0) {
    perror("fork");
    return 1;
  }
  if (child == 0)
    exit(run(true) == 0 ? 0 : 1); /* exit(), not _exit(): LeakSanitizer checks at exit */
  int wstatus = 0;
  while (waitpid(child, &wstatus, 0) < 0 && errno == EINTR) {
  }
  int failures = run(false);
  if (!WIFEXITED(wstatus) || WEXITSTATUS(wstatus) != 0) {
    fprintf(stderr, "FAIL module: the teardown's process ended with status 0x%x\n", wstatus);
    failures++;
  }
  return failures == 0 ? 0 : 1;
}
