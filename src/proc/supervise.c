/* The process supervisor: core.spawn{...} and proc:wait().
 *
 * Every child is started by spawn.c (posix_spawn in its own session and process group) and
 * supervised here, watched through a pidfd on the loop. Signals go to the whole group: a deadline sends
 * TERM and, after the grace, KILL; an abort sends KILL at once; and when the leader exits,
 * whatever it left behind in its group is killed, so no background job outlives its command.
 * stdout and stderr are captured up to a per-stream cap; past it the bytes are drained and
 * dropped, so memory stays at the cap however much a child writes. The environment is exactly
 * the table given, through envp.
 *
 * A walled child (opts.walls = the socket of a sandbox instance's spawner, docs/isolation.md)
 * is started by the spawner inside the instance instead: the engine makes the pipes, hands
 * them over its one link to that spawner (spawn.c, link.c) and is told the command's end by
 * the link instead of a pidfd. Its wait status arrives there (walls/request.h); a signal for
 * its group is a frame sent there; the link closing — the engine killed — kills the group
 * inside. So deadline, grace, abort, capture and streaming are the same code for both kinds. */
#include "proc.h"
#include "spawn.h"
#include "spawn_thread.h"
#include "../engine/engine.h"
#include "../engine/list.h"
#include "../log/log.h"
#include "walls/request.h"

#include <errno.h>
#include <limits.h>
#include <stdio.h>
#include <signal.h>
#include <stdlib.h>
#include <fcntl.h>
#include <spawn.h>
#include <string.h>
#include <sys/resource.h>
#include <sys/socket.h>
#include <sys/syscall.h>
#include <sys/wait.h>
#include <unistd.h>

#define PROC_MT "switchboard.process"

enum {
  DEFAULT_KILL_GRACE_MS = 10000,
  DEFAULT_MAX_OUTPUT = 1 << 20,
  /* After the leader exits and its group is killed, a descendant that escaped the group (its
   * own setsid) may still hold our pipes; stop waiting for EOF after this long. */
  PIPE_LINGER_MS = 250,
  READ_SCRATCH = 64 * 1024,
  EXIT_TIMED_OUT = 124,
};

typedef struct {
  uv_pipe_t pipe;
  const char *name; /* "stdout" | "stderr" */
  char *data;       /* owned; grows up to limit */
  size_t len, cap, limit, dropped;
  size_t widen_at; /* a new pipe's capacity: once this much arrived, widen it (0: never) */
  bool open;
} capture;

/* The stdin a caller gave: its pipe and requests, allocated only then (most commands have none). */
typedef struct {
  uv_pipe_t pipe;
  uv_write_t write;
  uv_shutdown_t shutdown;
} stdin_feed;

/* The record is a Lua userdata held while the command runs: a server holds two per walled
 * request (the instance's holder and the command), 4,000 at 2,000 threads (issue 43's RSS row).
 * So stdin's pipe and requests are allocated apart, only for a caller that gives one, and the
 * three timed phases share one timer: the deadline, then the grace after its TERM, then the
 * linger after the exit — each starts as the last ends (record_end stops whichever runs), never
 * two at once. 2,064 → 1,224 bytes. */
typedef struct sb_proc {
  uv_poll_t exit_poll; /* on the pidfd: readable once the child has exited */
  int pidfd;
  capture out, err;
  stdin_feed *in;  /* NULL: no stdin given */
  uv_timer_t timer; /* the deadline, then the grace, then the linger */
  sb_abort_listener on_abort;
  int signal_ref, on_output_ref, stdin_ref, result_ref, self_ref;
  int on_exit_ref; /* opts.on_exit: told the result on the loop (no task waits for it) */
  lua_State *waiter;
  uint64_t kill_grace_ms;
  int pid;
  bool exited, timed_out, aborted, finished;
  int64_t exit_status;
  int term_signal;
  double started_ms, ended_ms;
  int open_handles;
  /* walled: on the link to the instance's spawner instead of the pidfd; pid is 0 */
  bool walled;
  /* started on the spawning thread (spawn_thread.h): `starter` is the task waiting in
   * core.spawn; a signal for the group meanwhile is kept and sent once the pid is known */
  bool starting;
  lua_State *starter;
  int pending_signal;
  lua_Integer deadline_ms;
  sb_abort *abort_sig; /* anchored by signal_ref */
  sb_link_member member;
  /* started from C (sb_proc_spawn_walled, the exec lane): a malloc'd record, not a userdata,
   * told its C result instead of a task, freed when its last handle closes */
  bool c_owned;
  sb_proc_done_fn c_done;
  void *c_done_ud;
  sb_proc_output_fn c_stdout; /* told of stdout as it arrives (sb_proc_watch_stdout) */
  void *c_stdout_ud;
  struct sb_proc *prev, *next; /* the live list */
} sb_proc;

static void walled_signal(struct sb_proc *p, int signo);

static sb_proc *live_head;
static int live_count;
static uint64_t lua_records, lua_results; /* sb_proc_lua_objects */
static char read_scratch[READ_SCRATCH]; /* libuv reads synchronously: alloc, read, callback */

/* ---- the live list ------------------------------------------------------------------------ */

static void live_add(sb_proc *p) {
  SB_LIST_PUSH(live_head, p);
  live_count++;
}

static void live_remove(sb_proc *p) {
  if (!SB_LIST_LISTED(live_head, p))
    return;
  SB_LIST_REMOVE(live_head, p);
  live_count--;
}

static void signal_group(sb_proc *p, int signo) {
  if (p->starting) {
    if (p->pending_signal != SIGKILL)
      p->pending_signal = signo;
  } else if (p->walled)
    walled_signal(p, signo);
  else if (p->pid > 0)
    kill(-p->pid, signo); /* ESRCH once the group is empty: nothing to do */
}

static void kill_all(int signo) {
  for (sb_proc *p = live_head; p; p = p->next)
    signal_group(p, signo);
}

/* ---- completion ----------------------------------------------------------------------------- */

static void handle_closed(uv_handle_t *h) {
  sb_proc *p = h->data;
  if (h == (uv_handle_t *)&p->exit_poll && p->pidfd >= 0) {
    close(p->pidfd);
    p->pidfd = -1;
  } else if (p->in != NULL && h == (uv_handle_t *)&p->in->pipe) {
    free(p->in);
    p->in = NULL;
  }
  if (--p->open_handles == 0 && p->c_owned) { /* (its captures are the result's by now, unless
                                                 * the engine's shutdown ended it) */
    free(p->out.data);
    free(p->err.data);
    free(p);
  } else if (p->open_handles == 0) {
    lua_State *L = sb_main_state();
    luaL_unref(L, LUA_REGISTRYINDEX, p->self_ref); /* the userdata may now be collected */
    p->self_ref = LUA_NOREF;
  }
}

static void close_handle(sb_proc *p, uv_handle_t *h) {
  if (h != NULL && h->data == p && !uv_is_closing(h)) {
    uv_close(h, handle_closed);
  }
}

/* The result's captures are the record's buffers, moved (the record keeps none: whoever is told
 * frees them). c->data is NULL after __gc freed it: at lua_close the userdata is finalized
 * before the engine's shutdown, and a module's shutdown that runs the loop (ws_shutdown) can
 * still deliver the child's exit — then the result's text is "" (c->len still counts the freed
 * bytes: not the result's). */
static void take_result(sb_proc *p, sb_proc_result *r) {
  *r = (sb_proc_result){.exit = p->exit_status, .signal = p->term_signal,
                        .timed_out = p->timed_out, .aborted = p->aborted,
                        .out = p->out.data, .err = p->err.data,
                        .out_len = p->out.data != NULL ? p->out.len : 0,
                        .err_len = p->err.data != NULL ? p->err.len : 0,
                        .out_dropped = p->out.dropped, .err_dropped = p->err.dropped,
                        .duration_ms = p->ended_ms - p->started_ms, .pid = p->pid};
  if (p->term_signal != 0)
    r->exit = 128 + p->term_signal;
  if (p->timed_out)
    r->exit = EXIT_TIMED_OUT; /* 137/143 from our own signal is the deadline, not a crash */
  p->out.data = p->err.data = NULL;
}

static void push_text(lua_State *L, const char *bytes, size_t len) {
  if (bytes != NULL)
    lua_pushlstring(L, bytes, len);
  else
    lua_pushliteral(L, "");
}

void sb_proc_result_push(lua_State *L, const sb_proc_result *r) {
  lua_results++;
  lua_createtable(L, 0, 12);
  lua_pushinteger(L, r->exit);
  lua_setfield(L, -2, "exit");
  if (r->signal != 0) {
    lua_pushinteger(L, r->signal);
    lua_setfield(L, -2, "signal");
  }
  lua_pushboolean(L, r->timed_out);
  lua_setfield(L, -2, "timed_out");
  lua_pushboolean(L, r->aborted);
  lua_setfield(L, -2, "aborted");
  push_text(L, r->out, r->out_len);
  lua_setfield(L, -2, "stdout");
  push_text(L, r->err, r->err_len);
  lua_setfield(L, -2, "stderr");
  lua_createtable(L, 0, 2);
  lua_pushboolean(L, r->out_dropped > 0);
  lua_setfield(L, -2, "stdout");
  lua_pushboolean(L, r->err_dropped > 0);
  lua_setfield(L, -2, "stderr");
  lua_setfield(L, -2, "truncated");
  lua_createtable(L, 0, 2);
  lua_pushinteger(L, (lua_Integer)r->out_dropped);
  lua_setfield(L, -2, "stdout");
  lua_pushinteger(L, (lua_Integer)r->err_dropped);
  lua_setfield(L, -2, "stderr");
  lua_setfield(L, -2, "dropped");
  lua_pushnumber(L, r->duration_ms);
  lua_setfield(L, -2, "duration_ms");
  lua_pushinteger(L, r->pid);
  lua_setfield(L, -2, "pid");
}

void sb_proc_lua_objects(uint64_t *records, uint64_t *results) {
  *records = lua_records;
  *results = lua_results;
}

static void release_refs(lua_State *L, sb_proc *p) {
  luaL_unref(L, LUA_REGISTRYINDEX, p->signal_ref);
  luaL_unref(L, LUA_REGISTRYINDEX, p->on_output_ref);
  luaL_unref(L, LUA_REGISTRYINDEX, p->stdin_ref);
  luaL_unref(L, LUA_REGISTRYINDEX, p->on_exit_ref);
  p->signal_ref = p->on_output_ref = p->stdin_ref = p->on_exit_ref = LUA_NOREF;
}

/* A C caller's end: its callback hears the result and may keep its buffers; what it leaves is
 * freed here. The record goes when its last handle closes (handle_closed). */
static void tell_c(sb_proc *p, sb_proc_result *r) {
  sb_proc_done_fn done = p->c_done;
  p->c_done = NULL;
  p->c_stdout = NULL;
  if (done != NULL)
    done(p->c_done_ud, r);
  free(r->out);
  free(r->err);
}

/* A Lua caller's end: the result table, kept (proc:wait after the end reads it again), goes
 * to the waiting task and to opts.on_exit. */
static void tell_lua(sb_proc *p, sb_proc_result *r) {
  lua_State *L = sb_main_state();
  sb_proc_result_push(L, r);
  p->result_ref = luaL_ref(L, LUA_REGISTRYINDEX);
  free(r->out);
  free(r->err);
  int on_exit = p->on_exit_ref; /* (taken before the release: told last, below) */
  p->on_exit_ref = LUA_NOREF;
  release_refs(L, p);
  if (p->waiter != NULL) {
    lua_State *task = p->waiter;
    p->waiter = NULL;
    lua_rawgeti(task, LUA_REGISTRYINDEX, p->result_ref);
    sb_task_complete(task, 1);
  }
  if (on_exit != LUA_NOREF) {
    lua_rawgeti(L, LUA_REGISTRYINDEX, on_exit);
    luaL_unref(L, LUA_REGISTRYINDEX, on_exit);
    lua_rawgeti(L, LUA_REGISTRYINDEX, p->result_ref);
    sb_pcall(L, 1, "spawn.on_exit");
  }
}

/* Settles once the leader is reaped and both pipes are closed (or the linger ran out). The
 * handles' closing completes on a later turn of the loop, after the caller was told. */
static void maybe_finish(sb_proc *p) {
  if (p->finished || !p->exited || p->out.open || p->err.open)
    return;
  p->finished = true;
  sb_abort_unlisten(&p->on_abort);
  live_remove(p);
  close_handle(p, (uv_handle_t *)&p->timer);
  close_handle(p, (uv_handle_t *)&p->exit_poll);
  sb_proc_result r;
  take_result(p, &r);
  if (p->c_owned)
    tell_c(p, &r);
  else
    tell_lua(p, &r);
}

static void capture_close(sb_proc *p, capture *c) {
  if (!c->open)
    return;
  c->open = false;
  uv_read_stop((uv_stream_t *)&c->pipe);
  close_handle(p, (uv_handle_t *)&c->pipe);
}

static void linger_expired(uv_timer_t *t) {
  sb_proc *p = t->data;
  capture_close(p, &p->out);
  capture_close(p, &p->err);
  maybe_finish(p);
}

static void record_end(sb_proc *p, int exit_code, int signo) {
  p->exited = true;
  p->exit_status = exit_code;
  p->term_signal = signo;
  p->ended_ms = sb_now_ms();
  uv_timer_stop(&p->timer); /* the deadline's or the grace's */
  signal_group(p, SIGKILL); /* what the leader left running dies with it */
  if (p->out.open || p->err.open)
    sb_timer_start(&p->timer, linger_expired, PIPE_LINGER_MS);
  maybe_finish(p);
}

static void record_exit(sb_proc *p, int status) {
  record_end(p, WIFEXITED(status) ? WEXITSTATUS(status) : 0,
             WIFSIGNALED(status) ? WTERMSIG(status) : 0);
}

/* Reaps the leader if it has exited (without waiting) and records its exit. Returns whether it
 * had. */
static bool walled_read_pending(sb_proc *p);

static bool reap_if_exited(sb_proc *p) {
  if (p->exited)
    return true;
  if (p->walled) /* a walled child's end arrives on its socket: read what is already there */
    return walled_read_pending(p);
  int wstatus = 0;
  pid_t got = waitpid(p->pid, &wstatus, WNOHANG);
  if (got == 0)
    return false; /* still running */
  uv_poll_stop(&p->exit_poll);
  if (got < 0)
    wstatus = 0; /* reaped by someone else: nothing more to learn */
  record_exit(p, wstatus);
  return true;
}

static void child_exited(uv_poll_t *h, int status, int events) {
  (void)status;
  (void)events;
  reap_if_exited(h->data); /* a spurious wakeup finds it still running */
}

/* ---- output -------------------------------------------------------------------------------- */

/* Room for the next read straight into the capture (no copy per chunk, issue 43): the buffer
 * doubles from 4 KiB up to the cap, so a quiet command holds little and a megabyte is read in
 * growing pieces. False when it cannot grow (the cap reached, or no memory). */
static bool capture_room(capture *c) {
  if (c->len < c->cap)
    return true;
  if (c->len >= c->limit)
    return false;
  size_t cap = c->cap ? c->cap * 2 : 4096;
  if (cap > c->limit)
    cap = c->limit;
  char *grown = realloc(c->data, cap);
  if (grown == NULL)
    return false;
  c->data = grown;
  c->cap = cap;
  return true;
}

static capture *capture_of(sb_proc *p, uv_handle_t *h) {
  return (uv_pipe_t *)h == &p->out.pipe ? &p->out : &p->err;
}

/* A read lands in the capture itself while it is under its cap; past it (or out of memory) in
 * the scratch buffer, from which capture_append drops and counts it. A stream's first read
 * lands in the scratch buffer too, FIRST_READ at most, and capture_append keeps what came: most
 * commands' streams bring nothing but their end, and a 4 KiB buffer made (and freed) for each of
 * them was two allocations of a walled `true`, each of which could consolidate the heap's fast
 * bins (issue 43: malloc's share of sandboxd's CPU per request). */
enum { FIRST_READ = 4096 };

static void alloc_capture(uv_handle_t *h, size_t suggested, uv_buf_t *buf) {
  (void)suggested;
  capture *c = capture_of(h->data, h);
  if (c->cap == 0 && c->len == 0)
    *buf = uv_buf_init(read_scratch, FIRST_READ);
  else if (capture_room(c))
    *buf = uv_buf_init(c->data + c->len, (unsigned)(c->cap - c->len));
  else
    *buf = uv_buf_init(read_scratch, sizeof read_scratch);
}

static void capture_append(capture *c, const char *bytes, size_t n) {
  size_t room = c->limit - c->len;
  size_t keep = n < room ? n : room;
  if (keep > 0 && c->len + keep > c->cap) {
    size_t cap = c->cap ? c->cap : 4096;
    while (cap < c->len + keep)
      cap *= 2;
    if (cap > c->limit)
      cap = c->limit;
    char *grown = realloc(c->data, cap);
    if (grown == NULL) {
      keep = 0; /* out of memory: account the bytes as dropped rather than abort */
    } else {
      c->data = grown;
      c->cap = cap;
    }
  }
  memcpy(c->data + c->len, bytes, keep);
  c->len += keep;
  c->dropped += n - keep;
}

/* A command that writes a whole pipe's worth (the kernel's 64 KiB) blocks whenever the loop has
 * not yet read, and the loop wakes once per few KiB: a megabyte of output cost the walled
 * request ~16 such stalls (issue 43). Once a stream has brought one full pipe, the pipe is
 * widened to the stream's cap (max_output, the policy's), within the host's pipe-max-size, so
 * the writer runs on without waiting and the reader takes it in large reads. Only then: a quiet
 * command's pipe stays the kernel's, since every pipe's capacity is charged to our user
 * (pipe-user-pages-soft, unless privileged), whatever it holds. A refusal keeps the pipe as it
 * is. */
static size_t host_pipe_max(void) {
  static size_t max;
  if (max == 0) {
    max = 1 << 20; /* the kernel's default, should /proc not tell */
    FILE *f = fopen("/proc/sys/fs/pipe-max-size", "re");
    unsigned long v = 0;
    if (f != NULL) {
      if (fscanf(f, "%lu", &v) == 1 && v >= 4096)
        max = v;
      fclose(f);
    }
  }
  return max;
}

/* The kernel's capacity of a new pipe: 16 pages (PIPE_DEF_BUFFERS), 64 KiB with 4 KiB pages. */
static size_t new_pipe_capacity(void) {
  static size_t capacity;
  if (capacity == 0) {
    long page = sysconf(_SC_PAGESIZE);
    capacity = 16 * (size_t)(page > 0 ? page : 4096);
  }
  return capacity;
}

/* The capture sized to its cap at once when its stream has brought a full pipe (with the widened
 * pipe, issue 43's 1 MB row): the reads that follow land in it whole, and no doubling copies
 * what came — a megabyte otherwise went through four more reallocs from 64 KiB, each of which
 * may move every byte so far. Untouched pages of the allocation cost nothing until written. A
 * refusal keeps the doubling. */
static void capture_presize(capture *c) {
  if (c->cap >= c->limit)
    return;
  char *grown = realloc(c->data, c->limit);
  if (grown == NULL)
    return;
  c->data = grown;
  c->cap = c->limit;
}

static void capture_widen(capture *c) {
  c->widen_at = 0; /* once, whatever comes of it */
  capture_presize(c);
  uv_os_fd_t fd;
  if (uv_fileno((uv_handle_t *)&c->pipe, &fd) != 0)
    return;
  size_t want = c->limit < host_pipe_max() ? c->limit : host_pipe_max();
  if (want <= new_pipe_capacity()) /* a host whose pipe-max-size is lower: never shrink */
    return;
  if (want > (size_t)INT_MAX)
    want = (size_t)INT_MAX;
  (void)fcntl(fd, F_SETPIPE_SZ, (int)want);
}

static void stream_to_lua(sb_proc *p, const capture *c, const char *bytes, size_t n) {
  lua_State *L = sb_main_state();
  lua_rawgeti(L, LUA_REGISTRYINDEX, p->on_output_ref);
  lua_pushstring(L, c->name);
  lua_pushlstring(L, bytes, n);
  sb_pcall(L, 2, "spawn.on_output");
}

static void on_read(uv_stream_t *s, ssize_t nread, const uv_buf_t *buf) {
  sb_proc *p = s->data;
  capture *c = capture_of(p, (uv_handle_t *)s);
  if (nread > 0) {
    size_t kept_before = c->len;
    bool in_place = c->data != NULL && buf->base == c->data + c->len;
    if (in_place)
      c->len += (size_t)nread;
    else
      capture_append(c, buf->base, (size_t)nread);
    if (c->widen_at > 0 && c->len + c->dropped >= c->widen_at)
      capture_widen(c); /* may move c->data: bytes read in place are found again below */
    const char *bytes = in_place ? c->data + kept_before : buf->base;
    if (p->on_output_ref != LUA_NOREF)
      stream_to_lua(p, c, bytes, (size_t)nread);
    if (p->c_stdout != NULL && c == &p->out && c->len > kept_before)
      p->c_stdout(p->c_stdout_ud, c->data, c->len);
    return;
  }
  if (nread < 0) { /* EOF or an error: either way this stream is done */
    capture_close(p, c);
    maybe_finish(p);
  }
}

/* ---- walled: the link to the spawner -------------------------------------------------------- */

/* A signal for the walled child's group: a frame to the spawner, after whatever of the link's
 * queue is still unsent. SIGKILL too goes as a frame, so the status still comes back. */
static void walled_signal(sb_proc *p, int signo) {
  if (p->exited)
    return;
  sb_link_signal(&p->member, signo);
}

/* The link ended without this command's reply: the instance ended (it was stopped, or the
 * spawner died) or it sent what cannot be a reply. Either way the command is over: said in
 * words on its stderr, and recorded as killed. */
static void walled_lost(sb_proc *p, const char *why) {
  capture_append(&p->err, why, strlen(why));
  if (p->on_output_ref != LUA_NOREF)
    stream_to_lua(p, &p->err, why, strlen(why));
  record_end(p, 0, SIGKILL);
}

/* The link tells the command's end (once; the member is off the link by then). */
static void walled_ended(sb_link_member *m, int rc, int code, int signo) {
  sb_proc *p = (sb_proc *)((char *)m - offsetof(sb_proc, member));
  if (p->exited)
    return;
  if (rc == 0)
    walled_lost(p, "\nwalls: the sandbox instance ended while the command ran\n");
  else if (rc < 0)
    walled_lost(p, "\nwalls: the instance's spawner sent what is not a wait status\n");
  else
    record_end(p, code, signo); /* the spawner already killed what it left in its group */
}

/* Reads, without waiting, whatever the spawner already sent: after a stall (the loop blocked
 * or the server stopped) a deadline is due before the poll phase has seen the reply of a
 * command that ended in time. Returns whether the command has ended. */
static bool walled_read_pending(sb_proc *p) {
  if (!p->exited)
    sb_link_read_now(&p->member);
  return p->exited;
}

/* ---- deadline and abort ------------------------------------------------------------------- */

static void grace_expired(uv_timer_t *t) { signal_group(t->data, SIGKILL); }


static void deadline_expired(uv_timer_t *t) {
  sb_proc *p = t->data;
  /* libuv runs due timers before it polls: after a stall (a long callback, the process
   * stopped) the child may have exited within its budget with its pidfd not yet seen. */
  if (reap_if_exited(p))
    return;
  p->timed_out = true;
  signal_group(p, SIGTERM);
  sb_timer_start(&p->timer, grace_expired, p->kill_grace_ms); /* (the deadline's timer, spent) */
}

static void abort_fired(sb_abort_listener *l, sb_abort *sig) {
  (void)sig;
  sb_proc *p = (sb_proc *)((char *)l - offsetof(sb_proc, on_abort));
  if (reap_if_exited(p)) /* it finished before the abort: not aborted */
    return;
  p->aborted = true;
  signal_group(p, SIGKILL);
}

/* ---- stdin --------------------------------------------------------------------------------- */

static void stdin_shut(uv_shutdown_t *req, int status) {
  (void)status;
  sb_proc *p = req->data;
  close_handle(p, (uv_handle_t *)&p->in->pipe);
}

static void stdin_written(uv_write_t *req, int status) {
  sb_proc *p = req->data;
  if (status < 0) { /* the child closed its stdin early: not our failure */
    close_handle(p, (uv_handle_t *)&p->in->pipe);
    return;
  }
  p->in->shutdown.data = p;
  if (uv_shutdown(&p->in->shutdown, (uv_stream_t *)&p->in->pipe, stdin_shut) != 0)
    close_handle(p, (uv_handle_t *)&p->in->pipe);
}

/* ---- core.spawn ---------------------------------------------------------------------------- */

static lua_Integer opt_ms(lua_State *L, int opts, const char *field, lua_Integer dflt) {
  lua_getfield(L, opts, field);
  lua_Integer v = dflt;
  if (!lua_isnil(L, -1)) {
    lua_Number n = lua_tonumber(L, -1);
    if (!lua_isnumber(L, -1) || n < 0 || n > 1e12)
      luaL_error(L, "opts.%s must be a non-negative number", field);
    v = (lua_Integer)n;
  }
  lua_pop(L, 1);
  return v;
}

static int field_ref(lua_State *L, int opts, const char *field, int type, const char *what) {
  lua_getfield(L, opts, field);
  if (lua_isnil(L, -1)) {
    lua_pop(L, 1);
    return LUA_NOREF;
  }
  if (lua_type(L, -1) != type)
    luaL_error(L, "opts.%s must be %s", field, what);
  return luaL_ref(L, LUA_REGISTRYINDEX);
}

static int push_spawn_fail(lua_State *L, const char *program, const char *cwd, int err) {
  if (err == ENOENT && cwd != NULL)
    lua_pushfstring(L, "cannot start '%s' in '%s': no such program or directory", program, cwd);
  else
    lua_pushfstring(L, "cannot start '%s': %s", program, strerror(err));
  int n = sb_push_fail(L, "spawn", lua_tostring(L, -1));
  lua_remove(L, -3); /* the message text */
  return n;
}

/* (the socket's path is the host's: never in a message a user may read) */
static int push_walled_fail(lua_State *L, const char *program, int err) {
  if (err == E2BIG)
    lua_pushfstring(L, "cannot start '%s' inside the sandbox instance: the command and its "
                       "environment are over the spawner's limits (%d arguments, %d variables, "
                       "%d bytes)", program, WALLS_MAX_ARGS, WALLS_MAX_ENV, WALLS_MAX_REQUEST);
  else
    lua_pushfstring(L, "cannot start '%s' inside the sandbox instance: its spawner does not "
                       "answer (%s); the instance has ended", program, strerror(err));
  int n = sb_push_fail(L, "spawn", lua_tostring(L, -1));
  lua_remove(L, -3); /* the message text */
  return n;
}

static void capture_open(sb_proc *p, capture *c, const char *name, size_t limit, int fd) {
  uv_pipe_init(sb_loop(), &c->pipe, 0);
  uv_pipe_open(&c->pipe, fd);
  c->pipe.data = p;
  c->name = name;
  c->limit = limit;
  size_t capacity = new_pipe_capacity(); /* known, not asked: no system call per spawn */
  c->widen_at = capacity < limit ? capacity : 0;
  c->open = true;
  p->open_handles++;
  uv_read_start((uv_stream_t *)&c->pipe, alloc_capture, on_read);
}

static void timer_init(sb_proc *p, uv_timer_t *t) {
  uv_timer_init(sb_loop(), t);
  t->data = p;
  p->open_handles++;
}

static void feed_stdin(lua_State *L, sb_proc *p, int fd) {
  p->in = calloc(1, sizeof *p->in);
  if (p->in == NULL) { /* no memory for it: the child reads an end of file */
    close(fd);
    return;
  }
  uv_pipe_init(sb_loop(), &p->in->pipe, 0);
  uv_pipe_open(&p->in->pipe, fd);
  p->in->pipe.data = p;
  p->open_handles++;
  lua_rawgeti(L, LUA_REGISTRYINDEX, p->stdin_ref);
  size_t len;
  const char *bytes = lua_tolstring(L, -1, &len); /* anchored by stdin_ref */
  lua_pop(L, 1);
  uv_buf_t buf = uv_buf_init((char *)bytes, (unsigned)len);
  p->in->write.data = p;
  if (uv_write(&p->in->write, (uv_stream_t *)&p->in->pipe, &buf, 1, stdin_written) != 0)
    close_handle(p, (uv_handle_t *)&p->in->pipe);
}

/* The child is running: supervised from here until it is reaped (nothing raises). */
static void supervise(lua_State *L, sb_proc *p, const sb_spawned *child) {
  p->pid = child->pid;
  p->pidfd = child->pidfd;
  p->started_ms = sb_now_ms();
  capture_open(p, &p->out, "stdout", p->out.limit, child->stdout_fd);
  capture_open(p, &p->err, "stderr", p->err.limit, child->stderr_fd);
  timer_init(p, &p->timer);
  if (!p->walled) {
    uv_poll_init(sb_loop(), &p->exit_poll, p->pidfd);
    p->exit_poll.data = p;
    p->open_handles++;
    uv_poll_start(&p->exit_poll, UV_READABLE, child_exited);
  }
  if (child->stdin_fd >= 0)
    feed_stdin(L, p, child->stdin_fd);
  if (p->deadline_ms > 0)
    sb_timer_start(&p->timer, deadline_expired, (uint64_t)p->deadline_ms);
  if (p->abort_sig != NULL)
    sb_abort_listen(p->abort_sig, &p->on_abort, abort_fired);
}

/* Nothing was started: the proc's references go (the userdata is then garbage). */
static void forget(lua_State *L, sb_proc *p) {
  release_refs(L, p);
  luaL_unref(L, LUA_REGISTRYINDEX, p->self_ref);
  p->self_ref = LUA_NOREF;
}

/* The spawning thread's answer, on the loop: the waiting task gets the proc, or nil, err. */
static void started_off_loop(void *ud, int rc, const sb_spawned *child, const char *program,
                             const char *cwd) {
  sb_proc *p = ud;
  lua_State *task = p->starter;
  p->starter = NULL;
  p->starting = false;
  if (rc != 0) {
    live_remove(p);
    forget(task, p);
    sb_task_complete(task, push_spawn_fail(task, program, cwd, rc));
    return;
  }
  supervise(task, p, child);
  if (p->pending_signal != 0) /* kill_all while it started */
    signal_group(p, p->pending_signal);
  lua_rawgeti(task, LUA_REGISTRYINDEX, p->self_ref);
  sb_task_complete(task, 1);
}

static int l_spawn(lua_State *L) {
  /* Every option is read, and every raise done, before anything is opened. */
  luaL_checktype(L, 1, LUA_TTABLE);
  sb_spawn_args a;
  sb_spawn_read(L, 1, &a);
  lua_Integer deadline_ms = opt_ms(L, 1, "deadline_ms", 0);
  lua_Integer grace_ms = opt_ms(L, 1, "kill_grace_ms", DEFAULT_KILL_GRACE_MS);
  lua_Integer max_output = opt_ms(L, 1, "max_output", DEFAULT_MAX_OUTPUT);
  lua_getfield(L, 1, "signal");
  sb_abort *sig = sb_abort_opt(L, -1);
  lua_pop(L, 1);
  lua_getfield(L, 1, "walls"); /* left on the stack: it anchors the string */
  if (!lua_isnil(L, -1) && lua_type(L, -1) != LUA_TSTRING)
    luaL_error(L, "opts.walls must be the path of an instance's spawner socket");
  const char *walls = lua_tostring(L, -1);
  sb_proc *p = lua_newuserdatauv(L, sizeof *p, 0);
  memset(p, 0, sizeof *p);
  luaL_setmetatable(L, PROC_MT);
  lua_records++;
  p->signal_ref = p->on_output_ref = p->stdin_ref = p->result_ref = p->self_ref = LUA_NOREF;
  p->on_exit_ref = LUA_NOREF;
  p->pidfd = -1;
  p->on_output_ref = field_ref(L, 1, "on_output", LUA_TFUNCTION, "a function");
  p->on_exit_ref = field_ref(L, 1, "on_exit", LUA_TFUNCTION, "a function");
  p->stdin_ref = field_ref(L, 1, "stdin", LUA_TSTRING, "a string");
  p->signal_ref = field_ref(L, 1, "signal", LUA_TUSERDATA, "a signal");
  lua_pushvalue(L, -1);
  p->self_ref = luaL_ref(L, LUA_REGISTRYINDEX); /* until every handle is closed */
  p->kill_grace_ms = (uint64_t)grace_ms;
  p->deadline_ms = deadline_ms;
  p->abort_sig = sig;
  p->out.limit = p->err.limit = (size_t)max_output;
  p->walled = walls != NULL;
  p->member.ended = walled_ended;
  bool with_stdin = p->stdin_ref != LUA_NOREF;

  /* In a task, a child of the host is started by the spawning thread: its vfork does not hold
   * the loop (spawn_thread.h). (A walled command is a frame on a link: nothing to hold.) */
  if (!walls && sb_task_running(L) && sb_spawn_off_loop(&a, with_stdin, started_off_loop, p) == 0) {
    p->starting = true;
    p->starter = L;
    live_add(p);
    return sb_task_yield(L);
  }
  sb_spawned child;
  int rc = walls ? sb_spawn_walled(&a, walls, with_stdin, &child, &p->member)
                 : sb_spawn_start(&a, with_stdin, &child);
  if (rc != 0) {
    forget(L, p);
    if (walls)
      return push_walled_fail(L, a.argv[0], rc);
    return push_spawn_fail(L, a.argv[0], a.cwd, rc);
  }
  live_add(p);
  supervise(L, p, &child);
  lua_rawgeti(L, LUA_REGISTRYINDEX, p->self_ref);
  return 1;
}

/* ---- from C: the exec lane (lane/exec_lane.c) ----------------------------------------------- */

/* A walled command started from C: the same record, timers, captures and link as core.spawn's
 * (so deadline, grace, caps and the link's end behave exactly as for a Lua caller), malloc'd
 * instead of a userdata (no Lua object per command: issue 43's per-request row), with its
 * result handed to `done` on the loop instead of to a waiting task. Its Lua references are
 * LUA_NOREF throughout: nothing of it is in Lua. */
int sb_proc_spawn_walled(const sb_spawn_args *a, const char *socket, int64_t deadline_ms,
                         int64_t grace_ms, int64_t max_output, sb_proc_done_fn done, void *ud,
                         sb_proc **out) {
  sb_proc *p = calloc(1, sizeof *p);
  if (p == NULL)
    return ENOMEM;
  p->signal_ref = p->on_output_ref = p->stdin_ref = p->result_ref = p->self_ref = LUA_NOREF;
  p->on_exit_ref = LUA_NOREF;
  p->pidfd = -1;
  p->kill_grace_ms = (uint64_t)grace_ms;
  p->deadline_ms = deadline_ms;
  p->out.limit = p->err.limit = (size_t)max_output;
  p->walled = true;
  p->member.ended = walled_ended;
  sb_spawned child;
  int rc = sb_spawn_walled(a, socket, false, &child, &p->member);
  if (rc != 0) {
    free(p); /* nothing started */
    return rc;
  }
  p->c_owned = true;
  p->c_done = done;
  p->c_done_ud = ud;
  live_add(p);
  supervise(NULL, p, &child); /* (no stdin: the Lua state is not read) */
  *out = p;
  return 0;
}

void sb_proc_watch_stdout(sb_proc *p, sb_proc_output_fn fn, void *ud) {
  p->c_stdout = fn;
  p->c_stdout_ud = ud;
}

void sb_proc_forget(sb_proc *p) {
  p->c_stdout = NULL;
  p->c_done = NULL;
}

/* Kills the command's group as an abort does (the result says aborted), unless it ended. */
void sb_proc_abort(sb_proc *p) {
  if (p->finished || reap_if_exited(p))
    return;
  p->aborted = true;
  signal_group(p, SIGKILL);
}

/* ---- methods ------------------------------------------------------------------------------- */

static int l_wait(lua_State *L) {
  sb_proc *p = luaL_checkudata(L, 1, PROC_MT);
  if (p->finished) {
    lua_rawgeti(L, LUA_REGISTRYINDEX, p->result_ref);
    return 1;
  }
  sb_task_check(L, "proc:wait");
  if (p->waiter != NULL)
    return luaL_error(L, "proc:wait: another task is already waiting for this process");
  p->waiter = L;
  return sb_task_yield(L);
}

static const struct {
  const char *name;
  int signo;
} signal_names[] = {{"TERM", SIGTERM}, {"KILL", SIGKILL}, {"INT", SIGINT},
                    {"HUP", SIGHUP},   {"QUIT", SIGQUIT}, {"USR1", SIGUSR1},
                    {"USR2", SIGUSR2}, {"STOP", SIGSTOP}, {"CONT", SIGCONT}};

static int l_kill(lua_State *L) {
  sb_proc *p = luaL_checkudata(L, 1, PROC_MT);
  const char *name = luaL_optstring(L, 2, "TERM");
  for (size_t i = 0; i < sizeof signal_names / sizeof signal_names[0]; i++) {
    if (strcmp(name, signal_names[i].name) == 0) {
      if (!p->finished)
        signal_group(p, signal_names[i].signo);
      return 0;
    }
  }
  return luaL_argerror(L, 2, "a signal name such as \"TERM\" or \"KILL\" expected");
}

static int l_pid(lua_State *L) {
  lua_pushinteger(L, ((sb_proc *)luaL_checkudata(L, 1, PROC_MT))->pid);
  return 1;
}

static int l_done(lua_State *L) {
  lua_pushboolean(L, ((sb_proc *)luaL_checkudata(L, 1, PROC_MT))->finished);
  return 1;
}

static int l_gc(lua_State *L) {
  sb_proc *p = luaL_checkudata(L, 1, PROC_MT);
  /* Only reached once every handle is closed (self_ref anchors it until then). */
  luaL_unref(L, LUA_REGISTRYINDEX, p->result_ref);
  p->result_ref = LUA_NOREF;
  free(p->out.data);
  free(p->err.data);
  p->out.data = p->err.data = NULL;
  free(p->in); /* (NULL unless the state closes with the stdin pipe open: lua_close) */
  p->in = NULL;
  return 0;
}

static int l_proc_count(lua_State *L) {
  lua_pushinteger(L, live_count);
  return 1;
}

/* core.proc_lua_objects() → records, results (sb_proc_lua_objects) */
static int l_proc_lua_objects(lua_State *L) {
  lua_pushinteger(L, (lua_Integer)lua_records);
  lua_pushinteger(L, (lua_Integer)lua_results);
  return 2;
}

/* core.open_files_limit([want]) → soft, hard: this process's RLIMIT_NOFILE; with want, the soft
 * limit is first raised (never lowered) towards want, up to the hard limit. A server sizes its
 * descriptors from its policy at start (sandboxd/descriptors.lua) instead of meeting EMFILE. */
static int l_open_files_limit(lua_State *L) {
  lua_Integer want = luaL_optinteger(L, 1, -1);
  struct rlimit rl;
  if (getrlimit(RLIMIT_NOFILE, &rl) != 0)
    return luaL_error(L, "open_files_limit: getrlimit: %s", strerror(errno));
  if (want > 0 && (rlim_t)want > rl.rlim_cur) {
    rlim_t cur = rl.rlim_cur;
    rl.rlim_cur = rl.rlim_max == RLIM_INFINITY || (rlim_t)want < rl.rlim_max ? (rlim_t)want : rl.rlim_max;
    if (setrlimit(RLIMIT_NOFILE, &rl) != 0)
      rl.rlim_cur = cur;
  }
  lua_Integer big = (lua_Integer)1 << 40;
  lua_pushinteger(L, rl.rlim_cur == RLIM_INFINITY ? big : (lua_Integer)rl.rlim_cur);
  lua_pushinteger(L, rl.rlim_max == RLIM_INFINITY ? big : (lua_Integer)rl.rlim_max);
  return 2;
}

static int l_kill_all(lua_State *L) {
  (void)L;
  kill_all(SIGKILL);
  return 0;
}

/* Engine shutdown: every live group is killed and its leader reaped (blocking: KILL cannot be
 * ignored, so this is short), then its handles are closed; waiting tasks are dropped. */
static void proc_shutdown(void *ud) {
  (void)ud;
  lua_State *L = sb_main_state();
  while (live_head != NULL) {
    sb_proc *p = live_head;
    live_remove(p);
    signal_group(p, SIGKILL);
    if (!p->exited && !p->walled && p->pid > 0) { /* (a child still starting: spawn_thread.c) */
      while (waitpid(p->pid, NULL, 0) < 0 && errno == EINTR) {
      }
    }
    p->exited = true;
    sb_link_leave(&p->member); /* its group is sent SIGKILL; the links close below */
    p->finished = true;
    p->waiter = NULL;
    sb_abort_unlisten(&p->on_abort);
    release_refs(L, p);
    capture_close(p, &p->out);
    capture_close(p, &p->err);
    close_handle(p, p->in != NULL ? (uv_handle_t *)&p->in->pipe : NULL);
    close_handle(p, (uv_handle_t *)&p->timer);
    close_handle(p, (uv_handle_t *)&p->exit_poll);
  }
  sb_link_close_all(); /* each spawner kills what its link started */
}

int sb_proc_open(lua_State *L) {
  sb_shutdown_register(proc_shutdown, NULL);
  static const luaL_Reg methods[] = {{"wait", l_wait}, {"kill", l_kill}, {NULL, NULL}};
  static const luaL_Reg fields[] = {{"pid", l_pid}, {"done", l_done}, {NULL, NULL}};
  static const luaL_Reg meta[] = {{"__gc", l_gc}, {NULL, NULL}};
  sb_class_register(L, &(sb_class){PROC_MT, methods, fields, meta});
  static const luaL_Reg fns[] = {
      {"spawn", l_spawn}, {"proc_count", l_proc_count}, {"kill_all", l_kill_all},
      {"proc_lua_objects", l_proc_lua_objects},
      {"open_files_limit", l_open_files_limit}, {NULL, NULL}};
  luaL_setfuncs(L, fns, 0);
  return 0;
}
