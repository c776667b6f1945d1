/* core.loop_remove(n) → true | false, "busy" | nil, message. One ioctl, no policy: which
 * device, when, and how often to ask again is lua/switchboard/shell/loop_devices.lua's.
 * LOOP_CTL_REMOVE waits for the block layer to let go of the disk (RCU grace periods: ~55 ms of
 * wall time here, almost no CPU), so in a task it runs on libuv's thread pool and the task
 * waits; elsewhere it runs here. */
#include "loop_devices.h"
#include "../engine/engine.h"
#include "../engine/list.h"

#include <errno.h>
#include <lauxlib.h>
#include <stdlib.h>
#include <string.h>

#include "walls/loops.h"

typedef struct loop_job {
  uv_work_t req;
  lua_State *task; /* NULL once shutdown dropped it */
  int number;
  int rc;
  struct loop_job *prev, *next;
} loop_job;

static loop_job *jobs; /* in flight, for shutdown */

static void push_outcome(lua_State *L, int number, int rc) {
  if (rc == 0) {
    lua_pushboolean(L, 1);
    lua_pushnil(L);
  } else if (rc == -EBUSY) {
    lua_pushboolean(L, 0);
    lua_pushliteral(L, "busy");
  } else {
    lua_pushnil(L);
    lua_pushfstring(L, "loop device %d could not be removed (LOOP_CTL_REMOVE): %s", number,
                    strerror(-rc));
  }
}

static void remove_work(uv_work_t *req) {
  loop_job *job = req->data;
  job->rc = walls_loop_remove(job->number);
}

static void remove_done(uv_work_t *req, int status) {
  (void)status; /* never cancelled: uv_cancel is not used */
  loop_job *job = req->data;
  lua_State *task = job->task;
  if (task != NULL) {
    SB_LIST_REMOVE(jobs, job);
    push_outcome(task, job->number, job->rc);
    free(job);
    sb_task_complete(task, 2);
    return;
  }
  free(job);
}

static void remove_shutdown(void *ud) {
  (void)ud;
  while (jobs != NULL) {
    loop_job *job = jobs;
    SB_LIST_REMOVE(jobs, job);
    job->task = NULL; /* freed by remove_done when its ioctl returns */
  }
}

static int l_loop_remove(lua_State *L) {
  lua_Integer n = luaL_checkinteger(L, 1);
  luaL_argcheck(L, n >= 0 && n <= (1 << 20), 1, "a loop device number");
  if (!sb_task_running(L)) {
    push_outcome(L, (int)n, walls_loop_remove((int)n));
    return 2;
  }
  loop_job *job = sb_calloc(L, 1, sizeof *job);
  job->number = (int)n;
  job->task = L;
  job->req.data = job;
  if (uv_queue_work(sb_loop(), &job->req, remove_work, remove_done) != 0) {
    free(job);
    return luaL_error(L, "loop_remove: cannot queue the removal");
  }
  SB_LIST_PUSH(jobs, job);
  return sb_task_yield(L);
}

int sb_loop_devices_open(lua_State *L) {
  sb_shutdown_register(remove_shutdown, NULL);
  static const luaL_Reg fns[] = {{"loop_remove", l_loop_remove}, {NULL, NULL}};
  luaL_setfuncs(L, fns, 0);
  return 0;
}
