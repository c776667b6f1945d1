/* The /exec lane (exec_lane.h). What it decides is exactly what the Lua path would, and nothing
 * more: the bearer (compared in constant time, its length hidden, as sandboxd/auth.lua does), the
 * thread key's rule (shell/protocol.lua check_thread_key), a body that is {command, timeoutMs?,
 * env?, network?} with values the Lua path takes as they are (routes.lua PARSE.exec,
 * sandboxd/env.lua), the budget clamp (shell/budget.lua), the kernel's argument limits
 * (routes.lua client_mistake: a request over them goes to Lua, which answers it). Anything
 * else — a field more, an env name Lua would upper-case, a network the instance does not have —
 * is the Lua path's, untouched. */
#include "exec_lane.h"
#include "answer_stream.h"
#include "exec_body.h"
#include "../http/lane_face.h"
#include "../http/server_response.h"
#include "../crypto/base64.h"
#include "../crypto/ct.h"
#include "../engine/engine.h"
#include "../json/json_text.h"
#include "../log/log.h"
#include "../log/log_lua.h"
#include "../proc/proc.h"

#include <errno.h>
#include <fcntl.h>
#include <lauxlib.h>
#include <math.h>
#include <poll.h>
#include <stdio.h>
#include <strings.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

enum {
  /* armed instances by key: a 2,000-instance fleet keeps its chains a couple of entries long */
  LANE_BUCKETS = 1024,
  /* routes.lua: MAX_ARG_STRLEN, ARG_MAX and the overhead of "bash -c" around a command */
  MAX_ARG_STRLEN = 32 * 4096,
  ARG_MAX_BYTES = 2 * 1024 * 1024,
  EXEC_OVERHEAD = 64,
  /* routes.lua SLICE: a longer answer is streamed by the Lua path, unless its stdout was
   * streamed here as it came (the program's stream_at: the policy's sandbox.stream_at_bytes) */
  SLICE = 64 * 1024,
};

typedef struct lane_entry {
  struct lane_entry *next;
  uint32_t hash;
  /* An entry stays in the table while it is armed, runs commands or has a use not yet reported
   * (dirty): a key's running commands are counted over its chain (O(1), not over every command
   * of the lane), and a disarmed entry's last use still reaches Lua. At most one armed per key. */
  bool armed;       /* false: disarmed, freed once nothing above holds it */
  unsigned running; /* its commands in the lane now */
  /* tally: its answered commands are counted and logged here and reported to Lua in batches
   * (lane->report_ref); else Lua hears each (heard_ref) */
  bool tally;
  bool dirty;                  /* a use since the last report: on lane->dirty */
  struct lane_entry *dirty_next;
  double last_used_ms;         /* sb_now_ms() at its last answered command's end */
  char *label;                 /* the log lines' thread/instance (Lua's runner.label), or NULL */
  int init_pidfd;   /* the instance's init: readable once it has ended */
  int record_ref;   /* Lua's record of this arming (lane.lua), given back with each outcome */
  /* the program's heard and back at its arming: a reload clears the program while the entry's
   * commands still run, and each is still heard and handed back */
  int heard_ref, back_ref;
  char *socket, *network, *oom_path, *pids_path;
  /* the counter files held open (-1: opened per read), when the descriptor budget has room
   * (sandboxd/descriptors.lua b.counters): four opens a request fewer */
  int oom_fd, pids_fd;
  struct sb_exec_lane *lane; /* its held counters are counted in lane->held */
  size_t key_len;
  char key[];
} lane_entry;

typedef struct sb_exec_lane {
  bool programmed;
  bool tally; /* programmed with a report: entries armed now tally (lane_entry.tally) */
  size_t max_held, held; /* instances that may hold their counter files open; that do */
  bool orphaned; /* the server is gone: freed when the last command ends */
  /* the bearer's token, compared in a time set by the credential's length only (ct.h): a
   * digest per request, even with its context reused, was ~3.5 % of sandboxd's samples per
   * walled `true` (OpenSSL 3's context setup) */
  sb_ct_secret token;
  size_t max_key;
  int64_t floor_ms, max_ms, default_ms, grace_ms, heartbeat_ms, max_output;
  /* a long answer as it comes (answer_stream.h), the policy's sandbox.stream_*: stdout past
   * stream_at starts the document; it is encoded and written stream_step at a time; the
   * heartbeats' reserve has reserve_margin bytes more, and past reserve_max the Lua path's way */
  int64_t stream_at, stream_step, reserve_margin, reserve_max;
  char *default_network, *bash;
  /* the tallied lines' events, named by Lua; kept, as report_ref, past a program(nil): the
   * commands of a disarmed entry still tally */
  char *log_request, *log_command;
  char **base_env; /* "NAME=value" */
  size_t *base_name_len;
  size_t n_base;
  int back_ref, heard_ref;
  char *head_lines; /* the answer's headers as its head carries them, made at programming */
  size_t head_lines_len;
  unsigned running;
  lane_entry *buckets[LANE_BUCKETS];
  /* The tally (entries armed with it): what the answered commands since the last report add to
   * Lua's metrics and idle clocks — their durations (rounded ms, in order), the heartbeat gaps,
   * the entries used. Reported by report_ref(durations, gaps, uses) report_ms after the first
   * (report_timer), on core.exec_lane.collect (a /metrics scrape, the idle watch, the drain) and
   * when the server goes. report_ref outlives a program(nil): a reload's tally is not lost. */
  lua_Integer *durations;
  size_t n_durations, cap_durations;
  lua_Integer gaps;
  lane_entry *dirty;
  int report_ref;
  int64_t report_ms;
  struct sb_exec_lane *prev_lane, *next_lane; /* every lane of the process (lanes) */
} sb_exec_lane;

typedef struct lane_run {
  struct lane_run *prev, *next; /* every running command of the process */
  sb_exec_lane *lane;
  lane_entry *e;
  sb_http_res *res; /* the lane's until handed back (then Lua's, and NULL here) */
  struct sb_proc *proc;
  uv_timer_t beat;
  double last_beat;
  unsigned gaps;
  bool aborted;
  long before_oom, before_pids;
  int64_t limit_ms;
  char remote[sizeof ((sb_http_conn *)0)->remote_addr]; /* the request log line's */
  double started_ms;
  bool streaming; /* the document has started: stdout goes out as it comes */
  sb_answer_stream stream;
  char *out; /* stdout, the capture itself, taken from the result at the command's end (owned) */
  size_t out_len;
} lane_run;

static lane_run *runs; /* the commands in the lane now, of every server */
static sb_exec_lane *lanes; /* every lane (one per server that was programmed) */
/* One timer for every lane's tally, in static storage: the engine's shutdown walk closes it,
 * with nothing to free (engine.c close_walk); made anew for a new loop (a spec's next run). */
static uv_timer_t report_timer;
static uv_loop_t *report_loop;

static uint32_t key_hash(const char *s, size_t n) {
  uint32_t h = 2166136261u; /* FNV-1a */
  for (size_t i = 0; i < n; i++)
    h = (h ^ (unsigned char)s[i]) * 16777619u;
  return h;
}

static void counters_release(lane_entry *e) {
  if (e->oom_fd < 0)
    return;
  close(e->oom_fd);
  close(e->pids_fd);
  e->oom_fd = e->pids_fd = -1;
  e->lane->held--;
}

static void entry_free(lane_entry *e) {
  free(e->label);
  if (e->init_pidfd >= 0)
    close(e->init_pidfd);
  counters_release(e);
  luaL_unref(sb_main_state(), LUA_REGISTRYINDEX, e->record_ref);
  luaL_unref(sb_main_state(), LUA_REGISTRYINDEX, e->heard_ref);
  luaL_unref(sb_main_state(), LUA_REGISTRYINDEX, e->back_ref);
  free(e->socket);
  free(e->network);
  free(e->oom_path);
  free(e->pids_path);
  free(e);
}

static bool entry_is(const lane_entry *e, uint32_t h, const char *key, size_t n) {
  return e->hash == h && e->key_len == n && memcmp(e->key, key, n) == 0;
}

/* The key's armed entry, or NULL. */
static lane_entry *entry_find(sb_exec_lane *lane, const char *key, size_t n) {
  uint32_t h = key_hash(key, n);
  for (lane_entry *e = lane->buckets[h % LANE_BUCKETS]; e != NULL; e = e->next)
    if (e->armed && entry_is(e, h, key, n))
      return e;
  return NULL;
}

/* The key's commands in the lane now, over its entries (an earlier arming, disarmed by an idle
 * check or a reload, may still run some): one chain, not every running command. */
static lua_Integer key_running(sb_exec_lane *lane, const char *key, size_t n) {
  uint32_t h = key_hash(key, n);
  lua_Integer running = 0;
  for (lane_entry *e = lane->buckets[h % LANE_BUCKETS]; e != NULL; e = e->next)
    if (entry_is(e, h, key, n))
      running += e->running;
  return running;
}

/* Freed (and off the table) once nothing holds it: not armed, no command, no unreported use. */
static void entry_settle(sb_exec_lane *lane, lane_entry *e) {
  if (e->armed || e->running > 0 || e->dirty)
    return;
  for (lane_entry **at = &lane->buckets[e->hash % LANE_BUCKETS]; *at != NULL; at = &(*at)->next)
    if (*at == e) {
      *at = e->next;
      break;
    }
  entry_free(e);
}

static void entry_disarm(sb_exec_lane *lane, lane_entry *e) {
  e->armed = false;
  entry_settle(lane, e);
}

static unsigned disarm_all(sb_exec_lane *lane) {
  unsigned running = lane->running;
  for (int b = 0; b < LANE_BUCKETS; b++) {
    lane_entry *next;
    for (lane_entry *e = lane->buckets[b]; e != NULL; e = next) {
      next = e->next; /* (e may be freed) */
      if (e->armed)
        entry_disarm(lane, e);
    }
  }
  return running;
}

static void program_clear(lua_State *L, sb_exec_lane *lane) {
  for (size_t i = 0; i < lane->n_base; i++)
    free(lane->base_env[i]);
  free(lane->base_env);
  free(lane->base_name_len);
  free(lane->default_network);
  free(lane->bash);
  lane->base_env = NULL;
  lane->base_name_len = NULL;
  lane->default_network = lane->bash = NULL;
  lane->n_base = 0;
  free(lane->head_lines);
  lane->head_lines = NULL;
  lane->head_lines_len = 0;
  luaL_unref(L, LUA_REGISTRYINDEX, lane->back_ref);
  luaL_unref(L, LUA_REGISTRYINDEX, lane->heard_ref);
  lane->back_ref = lane->heard_ref = LUA_NOREF;
  lane->programmed = false;
  lane->tally = false;
}

/* ---- the head ------------------------------------------------------------------------------ */

/* The header's value when it occurs exactly once (a repeated one is joined by Lua: its path). */
static bool one_header(const sb_http_request *q, const char *lower, const char **v, size_t *n) {
  int seen = 0;
  for (size_t i = 0; i < q->n_headers; i++)
    if (sb_http_name_is(sb_http_header_name(q, i), q->headers[i].name_len, lower)) {
      *v = sb_http_header_value(q, i);
      *n = q->headers[i].value_len;
      seen++;
    }
  return seen == 1;
}

/* auth.lua bearer + checker: "Bearer" (any case), one space, the credential with the spaces
 * around it dropped, non-empty; its digest equal to the token's, compared in constant time. */
static bool bearer_ok(sb_exec_lane *lane, const char *v, size_t n) {
  if (n < 7 || strncasecmp(v, "bearer", 6) != 0 || v[6] != ' ')
    return false;
  size_t first = 7, last = n;
  while (first < n && v[first] == ' ')
    first++;
  while (last > first && v[last - 1] == ' ')
    last--;
  if (first == last)
    return false;
  return sb_ct_secret_equal(&lane->token, v + first, last - first) == 1;
}

/* protocol.lua check_thread_key. */
static bool key_ok(const sb_exec_lane *lane, const char *k, size_t n) {
  if (n == 0 || n > lane->max_key || k[0] == ' ' || k[n - 1] == ' ')
    return false;
  for (size_t i = 0; i < n; i++)
    if ((unsigned char)k[i] < 32 || (unsigned char)k[i] > 126)
      return false;
  return true;
}

static void *lane_head(sb_http_conn *c) {
  sb_exec_lane *lane = c->server->lane;
  if (lane == NULL || !lane->programmed)
    return NULL;
  const sb_http_request *q = &c->req;
  if (strcmp(sb_http_request_method(q), "POST") != 0 || q->target_len != 5 ||
      memcmp(q->head, "/exec", 5) != 0 || !q->has_body || q->expect_continue)
    return NULL;
  const char *auth, *key;
  size_t auth_len, key_len;
  if (!one_header(q, "authorization", &auth, &auth_len) ||
      !one_header(q, "x-thread-key", &key, &key_len) || !key_ok(lane, key, key_len) ||
      !bearer_ok(lane, auth, auth_len) || entry_find(lane, key, key_len) == NULL)
    return NULL;
  /* the claim is the lane, not the entry: Lua may disarm (and free) the entry while the body
   * arrives, so the request looks its key up again when it is complete */
  return lane;
}

/* ---- the body ------------------------------------------------------------------------------ */

typedef struct {
  sb_exec_body body; /* the body as read (exec_body.h): the command and env pairs live in it */
  int64_t limit_ms;
} lane_call;

static bool blank(const char *s, size_t n) {
  for (size_t i = 0; i < n; i++)
    if (!(s[i] == ' ' || (s[i] >= '\t' && s[i] <= '\r')))
      return false;
  return true;
}

/* budget.lua server_budget: a finite number truncated and clamped into [floor, max]. */
static int64_t clamp_budget(const sb_exec_lane *lane, double v) {
  if (!isfinite(v))
    return lane->default_ms;
  if (v >= (double)lane->max_ms)
    return lane->max_ms;
  if (v <= (double)lane->floor_ms)
    return lane->floor_ms;
  return (int64_t)v; /* truncation toward zero, as math.floor/ceil there */
}

static bool env_name_ok(const char *s, size_t n) {
  if (n == 0 || !((s[0] >= 'A' && s[0] <= 'Z') || s[0] == '_'))
    return false;
  for (size_t i = 1; i < n; i++)
    if (!((s[i] >= 'A' && s[i] <= 'Z') || (s[i] >= '0' && s[i] <= '9') || s[i] == '_'))
      return false;
  return true;
}

/* env: NAME = "value" pairs that envFromRequest keeps whole (names already upper case
 * identifiers, values without NUL). */
static bool env_ok(const sb_exec_body *b) {
  for (size_t i = 0; i < b->n_env; i++) {
    const sb_exec_env_pair *pair = &b->env[i];
    if (!env_name_ok(pair->name, pair->name_len) || memchr(pair->value, '\0', pair->value_len) != NULL)
      return false;
  }
  return true;
}

/* Reads the body in C (exec_body.c: what core.json.decode would read, or not mine) into `call`;
 * false: the Lua path's. call->body is the caller's to free (call_free), also after false. */
static bool read_call(sb_exec_lane *lane, lane_entry *e, const sb_http_request *q, lane_call *call) {
  sb_exec_body *b = &call->body;
  if (!sb_exec_body_read(q->body != NULL ? q->body : "", q->body_len, b))
    return false;
  call->limit_ms = b->has_timeout ? clamp_budget(lane, b->timeout_ms) : lane->default_ms;
  if (b->command == NULL || blank(b->command, b->command_len) ||
      memchr(b->command, '\0', b->command_len) != NULL || !env_ok(b))
    return false;
  /* protocol.lua NETWORKS, then the instance's own (a mismatch is Lua's 409) */
  const char *network = b->network != NULL ? b->network : lane->default_network;
  size_t network_len = b->network != NULL ? b->network_len : strlen(network);
  if (network_len != strlen(network) || /* a NUL inside: no network of protocol.lua's */
      (strcmp(network, "host") != 0 && strcmp(network, "none") != 0) ||
      strcmp(network, e->network) != 0)
    return false;
  return true;
}

static void call_free(lane_call *call) {
  sb_exec_body_free(&call->body);
}

/* ---- the environment ----------------------------------------------------------------------- */

/* The base env (policies/execution.lua child_env) with the request's on top, as "NAME=value"
 * strings, NULL-terminated, in one allocation (env_free): the base's entries are the lane's
 * own, lent for as long as the request is read and sent (the lane outlives lane_request), and
 * the request's are copied behind the pointers — no allocation per variable (issue 43: a
 * strdup and a free of each base entry per request). NULL when the kernel would refuse the
 * command (routes.lua client_mistake: the Lua path answers that) or memory ran out. */
static char **merged_env(const sb_exec_lane *lane, const lane_call *call) {
  const sb_exec_body *b = &call->body;
  if (b->command_len + 1 > MAX_ARG_STRLEN)
    return NULL;
  size_t slots = lane->n_base + b->n_env + 1, text = 0;
  for (size_t i = 0; i < b->n_env; i++)
    text += b->env[i].name_len + b->env[i].value_len + 2;
  char **envp = malloc(slots * sizeof *envp + text);
  if (envp == NULL)
    return NULL;
  char *at = (char *)(envp + slots); /* the request's entries' text */
  size_t total = b->command_len + 1 + EXEC_OVERHEAD, k = 0;
  for (size_t i = 0; i < lane->n_base; i++) {
    const char *entry = lane->base_env[i];
    if (sb_exec_body_env(b, entry, lane->base_name_len[i]) != NULL)
      continue; /* overridden by the request */
    size_t len = strlen(entry);
    if (len + 1 > MAX_ARG_STRLEN)
      goto refused;
    total += len + 1 + 8;
    envp[k++] = (char *)entry;
  }
  for (size_t i = 0; i < b->n_env; i++) {
    const sb_exec_env_pair *pair = &b->env[i];
    size_t kn = pair->name_len, vn = pair->value_len;
    if (kn + 1 + vn + 1 > MAX_ARG_STRLEN)
      goto refused;
    total += kn + 1 + vn + 1 + 8;
    memcpy(at, pair->name, kn);
    at[kn] = '=';
    memcpy(at + kn + 1, pair->value, vn);
    at[kn + vn + 1] = '\0';
    envp[k++] = at;
    at += kn + vn + 2;
  }
  envp[k] = NULL;
  if (total > ARG_MAX_BYTES)
    goto refused;
  return envp;
refused:
  free(envp);
  return NULL;
}

static void env_free(char **envp) { free(envp); }

/* ---- the instance's counters --------------------------------------------------------------- */

/* The number after `word ` in a cgroup events file's text (instance.lua counter), 0 when none. */
static long counter_in(char *buf, ssize_t n, const char *word) {
  if (n <= 0)
    return 0;
  buf[n] = '\0';
  size_t wn = strlen(word);
  for (char *at = strstr(buf, word); at != NULL; at = strstr(at + 1, word))
    if ((at == buf || at[-1] == '\n') && at[wn] == ' ')
      return strtol(at + wn + 1, NULL, 10);
  return 0;
}

/* A counter of the instance, 0 when unread. Read four times per command (before and after, two
 * files): through the descriptor held open (one pread: the file's text anew from offset 0), or
 * else open, one read, close — not stdio's open, fstat, read, read-to-EOF, close. An events file
 * is a few short lines, whole in one read. */
static long counter(int held, const char *path, const char *word) {
  char buf[512];
  ssize_t n;
  if (held >= 0) {
    do
      n = pread(held, buf, sizeof buf - 1, 0);
    while (n < 0 && errno == EINTR);
    return counter_in(buf, n, word);
  }
  int fd = open(path, O_RDONLY | O_CLOEXEC | O_NOCTTY);
  if (fd < 0)
    return 0;
  do
    n = read(fd, buf, sizeof buf - 1);
  while (n < 0 && errno == EINTR);
  close(fd);
  return counter_in(buf, n, word);
}

/* The counter files held open while the budget has room (lane->max_held): both or neither. */
static void counters_hold(sb_exec_lane *lane, lane_entry *e) {
  if (lane->held >= lane->max_held)
    return;
  int oom = open(e->oom_path, O_RDONLY | O_CLOEXEC | O_NOCTTY);
  int pids = oom < 0 ? -1 : open(e->pids_path, O_RDONLY | O_CLOEXEC | O_NOCTTY);
  if (pids < 0) {
    if (oom >= 0)
      close(oom);
    return;
  }
  e->oom_fd = oom;
  e->pids_fd = pids;
  lane->held++;
}

static bool init_ended(const lane_entry *e) {
  if (e->init_pidfd < 0)
    return false;
  struct pollfd p = {.fd = e->init_pidfd, .events = POLLIN};
  return poll(&p, 1, 0) > 0;
}

/* ---- the run ------------------------------------------------------------------------------- */

/* ---- the tally ----------------------------------------------------------------------------- */

static bool tally_pending(const sb_exec_lane *lane) {
  return lane->n_durations > 0 || lane->gaps > 0 || lane->dirty != NULL;
}

/* Lua's report(durations, gaps, uses): uses = {record, last_used_ms, record, …} of the entries
 * used since the last report. The tally is reset (and entries nothing else holds freed) before
 * the call, so a report that collects again finds nothing; without a report function (never
 * programmed with one) it waits. */
static void report(lua_State *L, sb_exec_lane *lane) {
  if (!tally_pending(lane) || lane->report_ref == LUA_NOREF)
    return;
  int top = lua_gettop(L);
  luaL_checkstack(L, 8, "exec lane report");
  lua_rawgeti(L, LUA_REGISTRYINDEX, lane->report_ref);
  lua_createtable(L, (int)lane->n_durations, 0);
  for (size_t i = 0; i < lane->n_durations; i++) {
    lua_pushinteger(L, lane->durations[i]);
    lua_rawseti(L, -2, (lua_Integer)i + 1);
  }
  lua_pushinteger(L, lane->gaps);
  lua_newtable(L);
  lua_Integer n = 0;
  lane_entry *e = lane->dirty;
  lane->dirty = NULL;
  lane->n_durations = 0;
  lane->gaps = 0;
  while (e != NULL) {
    lane_entry *next = e->dirty_next;
    lua_rawgeti(L, LUA_REGISTRYINDEX, e->record_ref);
    lua_rawseti(L, -2, ++n);
    lua_pushnumber(L, e->last_used_ms);
    lua_rawseti(L, -2, ++n);
    e->dirty = false;
    e->dirty_next = NULL;
    entry_settle(lane, e); /* (its record is in the table now) */
    e = next;
  }
  sb_pcall(L, 3, "exec lane report");
  lua_settop(L, top);
}

static void report_due(uv_timer_t *t) {
  (void)t;
  lua_State *L = sb_main_state();
  for (sb_exec_lane *lane = lanes; lane != NULL;) {
    sb_exec_lane *next = lane->next_lane; /* (a report runs Lua: it may close a server) */
    report(L, lane);
    lane = next;
  }
}

/* The lane's report is due report_ms after its first tally since the last one. The timer never
 * keeps the loop alive. */
static void report_later(sb_exec_lane *lane) {
  if (report_loop != sb_loop() || uv_is_closing((uv_handle_t *)&report_timer)) {
    uv_timer_init(sb_loop(), &report_timer);
    uv_unref((uv_handle_t *)&report_timer);
    report_loop = sb_loop();
  }
  if (!uv_is_active((uv_handle_t *)&report_timer))
    uv_timer_start(&report_timer, report_due, (uint64_t)(lane->report_ms > 0 ? lane->report_ms : 0), 0);
}

/* An answered command of a tallied entry, as lane.lua heard would hear it: counted (its
 * duration, gaps, the instance's last use) for the next report, and its lines written now, in
 * order with every other line — the debug line (routes.lua account_command's sandboxd.exec) when
 * debug lines are written, then the request line (request_log.lua's fields, lane=1). */
static void tally(sb_exec_lane *lane, lane_run *run, lua_Integer exit, double duration_ms) {
  lane_entry *e = run->e;
  lua_Integer duration = (lua_Integer)floor(duration_ms + 0.5);
  if (lane->n_durations == lane->cap_durations) {
    size_t cap = lane->cap_durations ? 2 * lane->cap_durations : 64;
    lua_Integer *grown = realloc(lane->durations, cap * sizeof *grown);
    if (grown != NULL) {
      lane->durations = grown;
      lane->cap_durations = cap;
    }
  }
  if (lane->n_durations < lane->cap_durations) /* (out of memory: the metric misses it) */
    lane->durations[lane->n_durations++] = duration;
  lane->gaps += run->gaps;
  e->last_used_ms = sb_now_ms();
  if (!e->dirty) {
    e->dirty = true;
    e->dirty_next = lane->dirty;
    lane->dirty = e;
  }
  report_later(lane);
  const char *label = e->label != NULL ? e->label : "";
  char dur[48], ex[48];
  if (lane->log_command != NULL && sb_log_enabled("debug")) {
    sb_log_int_text(dur, (long long)duration);
    sb_log_int_text(ex, (long long)exit);
    sb_log_field f[] = {{"duration_ms", dur, true}, {"exit", ex, true}, {"instance", label, false}};
    sb_log_write("debug", lane->log_command, f, 3);
  }
  if (lane->log_request != NULL) {
    sb_log_float_text(dur, sizeof dur, floor(duration_ms * 10 + 0.5) / 10);
    sb_log_field f[7] = {{"duration_ms", dur, true}, {"lane", "1", true}, {"method", "POST", false}};
    size_t n = 3;
    if (run->remote[0] != '\0')
      f[n++] = (sb_log_field){"remote", run->remote, false};
    f[n++] = (sb_log_field){"route", "/exec", false};
    f[n++] = (sb_log_field){"status", "200", true};
    f[n++] = (sb_log_field){"thread", label, false};
    sb_log_write("info", lane->log_request, f, n);
  }
}

static void lane_free(lua_State *L, sb_exec_lane *lane) {
  report(L, lane); /* the last tally reaches Lua */
  disarm_all(lane);
  program_clear(L, lane);
  luaL_unref(L, LUA_REGISTRYINDEX, lane->report_ref);
  free(lane->durations);
  free(lane->log_request);
  free(lane->log_command);
  sb_ct_secret_clear(&lane->token);
  if (lane->prev_lane)
    lane->prev_lane->next_lane = lane->next_lane;
  else if (lanes == lane)
    lanes = lane->next_lane;
  if (lane->next_lane)
    lane->next_lane->prev_lane = lane->prev_lane;
  free(lane);
}

static void run_closed(uv_handle_t *h) {
  lane_run *run = h->data;
  sb_exec_lane *lane = run->lane;
  sb_answer_stream_free(&run->stream);
  free(run->out);
  free(run);
  if (lane->orphaned && lane->running == 0)
    lane_free(sb_main_state(), lane);
}

static void run_end(lua_State *L, lane_run *run) {
  if (run->prev)
    run->prev->next = run->next;
  else
    runs = run->next;
  if (run->next)
    run->next->prev = run->prev;
  sb_http_res_release(run->res);
  run->res = NULL;
  lane_entry *e = run->e;
  e->running--;
  run->lane->running--;
  entry_settle(run->lane, e);
  uv_close((uv_handle_t *)&run->beat, run_closed);
}

/* One space every heartbeat (routes.lua heartbeat): a peer that went away stops the command. */
static void beat(uv_timer_t *t) {
  lane_run *run = t->data;
  if (sb_http_res_gone(run->res)) {
    if (!run->aborted) {
      run->aborted = true;
      sb_proc_abort(run->proc);
    }
    return;
  }
  double now = sb_now_ms();
  if (now - run->last_beat > 1.5 * (double)run->lane->heartbeat_ms)
    run->gaps++;
  run->last_beat = now;
  if (!run->streaming) {
    sb_http_res_write(run->res, " ", 1);
    return;
  }
  /* inside the document's stdout: one byte held back for this, never a space */
  if (run->stream.held_len > 0) {
    sb_http_res_write(run->res, run->stream.held, 1);
    sb_answer_stream_sent(&run->stream, 1);
  }
}

/* The peer is gone: the beat, due now, stops the command (the capture's reader must not). */
static void peer_gone(lane_run *run) { uv_timer_start(&run->beat, beat, 0, 0); }

/* What is held beyond the reserve goes out. */
static void stream_flush(lane_run *run) {
  size_t ready = sb_answer_stream_ready(&run->stream);
  if (ready == 0)
    return;
  if (!sb_http_res_write(run->res, run->stream.held, ready))
    peer_gone(run);
  sb_answer_stream_sent(&run->stream, ready);
}

/* stdout as it arrives (sb_proc_watch_stdout): past the program's stream_at the document starts, with a
 * reserve held for the heartbeats until the deadline and the grace (answer_stream.h). */
static void stdout_came(void *ud, char *so_far, size_t len) {
  lane_run *run = ud;
  if (sb_http_res_gone(run->res)) {
    peer_gone(run);
    return;
  }
  const sb_exec_lane *lane = run->lane;
  if (!run->streaming) {
    if (len <= (size_t)lane->stream_at)
      return;
    int64_t elapsed = (int64_t)(sb_now_ms() - run->started_ms);
    size_t reserve = sb_answer_stream_reserve(run->limit_ms - elapsed, lane->grace_ms,
                                              lane->heartbeat_ms, (size_t)lane->reserve_margin);
    if (reserve > (size_t)lane->reserve_max) /* heartbeats too many for a held reserve: Lua's */
      return;
    sb_answer_stream_start(&run->stream, reserve);
    run->streaming = true;
  }
  /* in steps: the held buffer stays one step's encoding (reused, never a fresh megabyte of
   * pages per request), and the socket takes each step as it is encoded */
  size_t step = (size_t)lane->stream_step;
  while (run->stream.taken < len && !sb_http_res_gone(run->res)) {
    size_t upto = len - run->stream.taken > step ? run->stream.taken + step : len;
    size_t before = run->stream.taken;
    if (!sb_answer_stream_feed(&run->stream, so_far, upto, false))
      return;
    stream_flush(run);
    if (run->stream.taken == before) /* a cut UTF-8 sequence at the very end: the next read */
      break;
  }
}

typedef struct {
  char *data;
  size_t len, cap;
  bool failed;
} text_buf;

static void put(void *ctx, const char *bytes, size_t n) {
  text_buf *b = ctx;
  if (b->failed)
    return;
  if (b->len + n > b->cap) {
    size_t cap = b->cap ? b->cap : 256;
    while (cap < b->len + n)
      cap *= 2;
    char *grown = realloc(b->data, cap);
    if (grown == NULL) {
      b->failed = true;
      return;
    }
    b->data = grown;
    b->cap = cap;
  }
  memcpy(b->data + b->len, bytes, n);
  b->len += n;
}

static void put_s(text_buf *b, const char *s) { put(b, s, strlen(s)); }

/* An integer's digits, without printf (one answer per request: issue 43). */
static void put_int(text_buf *b, lua_Integer v) {
  char digits[24];
  put(b, digits, sb_log_int_text(digits, (long long)v));
}

static void put_base64(text_buf *b, const char *name, const char *s, size_t n) {
  size_t m = sb_base64_encoded_len(n, SB_B64_STD);
  char *out = m == SIZE_MAX ? NULL : malloc(m ? m : 1);
  if (out == NULL) {
    b->failed = true;
    return;
  }
  sb_base64_encode(out, (const uint8_t *)s, n, SB_B64_STD);
  put_s(b, ",\"");
  put_s(b, name);
  put_s(b, "Base64\":\"");
  put(b, out, m);
  put_s(b, "\"");
  free(out);
}

/* A success document's last keys: the exact bytes of a stream that was not valid UTF-8
 * (wire_text.lua), then the closing brace. False when the buffer could not grow. */
static bool put_end(text_buf *b, bool out_valid, const char *out, size_t out_len, bool err_valid,
                    const char *err, size_t err_len) {
  if (!out_valid)
    put_base64(b, "stdout", out, out_len);
  if (!err_valid)
    put_base64(b, "stderr", err, err_len);
  put_s(b, "}");
  return !b->failed;
}

/* wire_text.lua answer_parts of a success document, in one buffer. */
/* The document's two numbers, `,"exitCode":E,"durationMs":D` without its first comma when
 * `first`: written by hand (sb_log_int_text), not with snprintf, ~1 % of sandboxd's CPU per
 * walled request. */
static void put_numbers(text_buf *b, bool first, lua_Integer exit, lua_Integer duration) {
  put_s(b, first ? "\"exitCode\":" : ",\"exitCode\":");
  put_int(b, exit);
  put_s(b, ",\"durationMs\":");
  put_int(b, duration);
}

static bool answer_text(text_buf *b, lua_Integer exit, lua_Integer duration, const char *out,
                        size_t out_len, const char *err, size_t err_len) {
  put_s(b, "{");
  put_numbers(b, true, exit, duration);
  put_s(b, ",\"stdout\":");
  bool out_valid = sb_json_string(out, out_len, put, b);
  put_s(b, ",\"stderr\":");
  bool err_valid = sb_json_string(err, err_len, put, b);
  return put_end(b, out_valid, out, out_len, err_valid, err, err_len);
}

/* A streamed success document's end: what follows the stdout already sent (its held bytes and
 * its closing quote are the caller's), in the order of answer_text's keys after stdout. */
static bool stream_tail(text_buf *b, lua_Integer exit, lua_Integer duration, bool out_valid,
                        const char *out, size_t out_len, const char *err, size_t err_len) {
  put_s(b, ",\"stderr\":");
  bool err_valid = sb_json_string(err, err_len, put, b);
  put_numbers(b, false, exit, duration);
  return put_end(b, out_valid, out, out_len, err_valid, err, err_len);
}

/* walled.lua's full(): the words a write that met the end of its file system leaves. */
static bool no_space(const char *s, size_t n) {
  return memmem(s, n, "No space left on device", 23) != NULL ||
         memmem(s, n, "Disk quota exceeded", 19) != NULL;
}

/* Lua hears the outcome (metrics, the log lines, the fleet's last use): heard(record, exit,
 * duration_ms, gaps, handed_back, remote), record the one its arming gave — or, for an entry
 * armed with the tally, the outcome is counted and its lines written here, and Lua hears the
 * counts in batches (report). After the answer, never before it. */
static void tell(lua_State *L, lane_run *run, lua_Integer exit, double duration_ms, bool back) {
  if (run->e->tally && !back) {
    tally(run->lane, run, exit, duration_ms);
    return;
  }
  lua_rawgeti(L, LUA_REGISTRYINDEX, run->e->heard_ref);
  lua_rawgeti(L, LUA_REGISTRYINDEX, run->e->record_ref);
  lua_pushinteger(L, exit);
  lua_pushnumber(L, duration_ms);
  lua_pushinteger(L, run->gaps);
  lua_pushboolean(L, back);
  lua_pushstring(L, run->remote);
  sb_pcall(L, 6, "exec lane heard");
}

/* The extraordinary outcome goes to Lua with its response still open: back(res, raw, record,
 * limit_ms, before, gaps, remote, streamed) in a task of its own (core.go), which composes and
 * sends the answer with the Lua path's own functions. record: its arming's, not the key's arming
 * now (the instance may have been armed anew, or every arm dropped by a reload or a drain, while
 * it ran). streamed: nil, or (stdout was streamed, and is now sent whole with its closing quote)
 * whether stdout was valid UTF-8: Lua writes the rest. */
static void hand_back(lua_State *L, lane_run *run, const sb_proc_result *r) {
  int top = lua_gettop(L);
  lua_getfield(L, LUA_REGISTRYINDEX, "switchboard.core");
  lua_getfield(L, -1, "go");
  lua_rawgeti(L, LUA_REGISTRYINDEX, run->e->back_ref);
  run->res = sb_http_res_push(L, run->res);
  sb_proc_result_push(L, r); /* raw: proc:wait's table, made only for Lua's path */
  lua_rawgeti(L, LUA_REGISTRYINDEX, run->e->record_ref);
  lua_pushinteger(L, run->limit_ms);
  lua_createtable(L, 0, 2);
  lua_pushinteger(L, run->before_oom);
  lua_setfield(L, -2, "oom");
  lua_pushinteger(L, run->before_pids);
  lua_setfield(L, -2, "pids");
  lua_pushinteger(L, run->gaps);
  lua_pushstring(L, run->remote);
  if (run->streaming)
    lua_pushboolean(L, run->stream.valid);
  else
    lua_pushnil(L);
  if (!sb_pcall(L, 9, "exec lane hand-back")) /* the task could not start: the peer learns */
    sb_http_res_finish(run->res, NULL, 0);
  lua_settop(L, top);
  run->res = NULL; /* Lua's now: the task's, or collected once finished */
}

/* A streamed stdout's last bytes: the rest of the capture encoded (final: an incomplete UTF-8
 * sequence at its end is U+FFFD, as in the whole document), the held reserve and the closing
 * quote — put at the start of `end` when given (an ordinary end: the tail follows them, and the
 * whole goes out in the one write that ends the body, not three), else written now (a
 * hand-back: Lua writes the rest). False when memory ran out (the document cannot be
 * completed). */
static bool stream_close(lane_run *run, const char *out, size_t out_len, text_buf *end) {
  run->stream.reserve = 0;
  size_t step = (size_t)run->lane->stream_step;
  bool last = false;
  while (!last) { /* what the last reads brought, in steps as they do */
    last = out_len - run->stream.taken <= step;
    if (!sb_answer_stream_feed(&run->stream, out, last ? out_len : run->stream.taken + step, last))
      return false;
    if (!last)
      stream_flush(run);
  }
  if (end != NULL) {
    put(end, run->stream.held, run->stream.held_len);
    put(end, "\"", 1);
  } else {
    sb_http_res_write(run->res, run->stream.held, run->stream.held_len);
    sb_http_res_write(run->res, "\"", 1);
  }
  sb_answer_stream_sent(&run->stream, run->stream.held_len);
  return end == NULL || !end->failed;
}

/* The command's end (sb_proc_spawn_walled): an ordinary outcome is answered here from the C
 * result; any other goes back to Lua, the result then made proc:wait's table. */
static void command_done(void *ud, sb_proc_result *r) {
  lane_run *run = ud;
  lua_State *L = sb_main_state();
  uv_timer_stop(&run->beat);
  lane_entry *e = run->e;
  run->out = r->out; /* the capture itself: ours now, run_closed frees it */
  run->out_len = r->out_len;
  r->out = NULL;
  const char *out = run->out != NULL ? run->out : "";
  size_t out_len = run->out_len, err_len = r->err_len;
  const char *err = r->err != NULL ? r->err : "";
  lua_Integer exit = r->exit;
  /* a streamed stdout is on the wire already: only what follows it counts against SLICE */
  size_t answer_len = (run->streaming ? 0 : out_len) + err_len;
  bool ordinary = r->out_dropped == 0 && r->err_dropped == 0 && !r->timed_out && !r->aborted &&
                  r->signal == 0 && !(exit != 0 && no_space(err, err_len)) &&
                  counter(e->oom_fd, e->oom_path, "oom_kill") == run->before_oom &&
                  counter(e->pids_fd, e->pids_path, "max") == run->before_pids && !init_ended(e) &&
                  answer_len < SLICE;
  text_buf b = {0};
  if (run->streaming && !stream_close(run, out, out_len, ordinary ? &b : NULL)) {
    free(b.data);
    sb_http_res_finish(run->res, NULL, 0); /* out of memory: the peer sees a cut document */
    tell(L, run, exit, r->duration_ms, false);
    run_end(L, run);
    return;
  }
  size_t stdout_end = b.len; /* a streamed stdout's last bytes and its quote, not yet sent */
  lua_Integer duration = (lua_Integer)floor(r->duration_ms + 0.5);
  if (ordinary && run->streaming)
    ordinary = stream_tail(&b, exit, duration, run->stream.valid, out, out_len, err, err_len);
  else if (ordinary)
    ordinary = answer_text(&b, exit, duration, out, out_len, err, err_len) && b.len <= SLICE;
  if (ordinary) {
    sb_http_res_finish(run->res, b.data, b.len);
    free(b.data);
    tell(L, run, exit, r->duration_ms, false);
  } else {
    if (stdout_end > 0) /* the tail could not be made: Lua writes it after stdout's end */
      sb_http_res_write(run->res, b.data, stdout_end);
    free(b.data);
    r->out = run->out; /* (lent back for the table: still ours) */
    hand_back(L, run, r);
    r->out = NULL;
  }
  run_end(L, run);
}

static bool lane_request(sb_http_conn *c) {
  bool claimed = c->lane_entry != NULL && c->lane_entry == c->server->lane;
  c->lane_entry = NULL;
  sb_exec_lane *lane = c->server->lane;
  const char *key;
  size_t key_len;
  if (!claimed || lane == NULL || !lane->programmed ||
      !one_header(&c->req, "x-thread-key", &key, &key_len))
    return false;
  lane_entry *e = entry_find(lane, key, key_len);
  if (e == NULL || !e->armed)
    return false;
  lua_State *L = sb_main_state();
  int top = lua_gettop(L);
  lane_call call = {0};
  char **envp = NULL;
  lane_run *run = NULL;
  bool taken = false;
  if (!read_call(lane, e, &c->req, &call) || (envp = merged_env(lane, &call)) == NULL)
    goto done;
  run = calloc(1, sizeof *run);
  if (run == NULL || (run->res = sb_http_res_open(c)) == NULL)
    goto done; /* (a response never started leaves the request to the Lua path: done) */
  run->lane = lane;
  run->e = e;
  run->limit_ms = call.limit_ms;
  memcpy(run->remote, c->remote_addr, sizeof run->remote);
  run->before_oom = counter(e->oom_fd, e->oom_path, "oom_kill");
  run->before_pids = counter(e->pids_fd, e->pids_path, "max");
  char *argv[] = {lane->bash, "-c", (char *)call.body.command, NULL};
  sb_spawn_args a = {.argv = argv, .envp = envp, .cwd = "/workspace"};
  int rc = sb_proc_spawn_walled(&a, e->socket, call.limit_ms, lane->grace_ms, lane->max_output,
                                command_done, run, &run->proc);
  if (rc != 0) { /* the spawner did not take it: Lua's path retries in a fresh instance */
    entry_disarm(lane, e);
    goto done;
  }
  e->running++;
  lane->running++;
  run->started_ms = sb_now_ms();
  sb_proc_watch_stdout(run->proc, stdout_came, run);
  sb_http_res_start_held_lines(run->res, 200, lane->head_lines, lane->head_lines_len);
  uv_timer_init(sb_loop(), &run->beat);
  run->beat.data = run;
  run->last_beat = sb_now_ms();
  if (lane->heartbeat_ms > 0)
    uv_timer_start(&run->beat, beat, (uint64_t)lane->heartbeat_ms, (uint64_t)lane->heartbeat_ms);
  run->next = runs;
  if (runs)
    runs->prev = run;
  runs = run;
  run = NULL; /* the command's own now: freed when it ends */
  taken = true;
done:
  if (run != NULL)
    sb_http_res_release(run->res);
  free(run);
  env_free(envp);
  call_free(&call);
  lua_settop(L, top);
  return taken;
}

/* ---- Lua's side ---------------------------------------------------------------------------- */

static int64_t int_field(lua_State *L, int t, const char *name) {
  lua_getfield(L, t, name);
  if (!lua_isinteger(L, -1))
    luaL_error(L, "lane program: %s must be an integer", name);
  int64_t v = (int64_t)lua_tointeger(L, -1);
  lua_pop(L, 1);
  return v;
}

static char *str_field(lua_State *L, int t, const char *name) {
  lua_getfield(L, t, name);
  const char *v = lua_tostring(L, -1);
  if (lua_type(L, -1) != LUA_TSTRING)
    luaL_error(L, "lane program: %s must be a string", name);
  char *copy = strdup(v);
  lua_pop(L, 1);
  if (copy == NULL)
    luaL_error(L, "lane program: out of memory");
  return copy;
}

static int ref_field(lua_State *L, int t, const char *name, int type) {
  lua_getfield(L, t, name);
  if (lua_type(L, -1) != type)
    luaL_error(L, "lane program: %s has the wrong type", name);
  return luaL_ref(L, LUA_REGISTRYINDEX);
}

static sb_exec_lane *lane_of(sb_http_server *s) {
  if (s->lane == NULL) {
    s->lane = calloc(1, sizeof *s->lane);
    if (s->lane == NULL)
      return NULL;
    s->lane->back_ref = s->lane->heard_ref = LUA_NOREF;
    s->lane->report_ref = LUA_NOREF;
    s->lane->next_lane = lanes;
    if (lanes)
      lanes->prev_lane = s->lane;
    lanes = s->lane;
  }
  return s->lane;
}

/* core.exec_lane.program(srv, program | nil): program = {token, max_key_bytes, floor_ms, max_ms, default_ms,
 * grace_ms, heartbeat_ms, max_output, stream_at, stream_step, reserve_margin, reserve_max,
 * network, bash, env = {NAME = value}, headers, back, heard, held_counters?, report?, report_ms,
 * log_request, log_command} (held_counters: how many armed instances may hold their two counter
 * files open, sandboxd/descriptors.lua b.counters; none when absent. report: instances armed
 * from now tally their answered commands — lines written here under the events
 * log_request/log_command, counts reported in batches — instead of heard per command). nil: the
 * lane off (every armed instance disarmed). Every armed instance is disarmed
 * by a new program too: Lua arms them again under the new snapshot. */
static void lane_release(sb_http_server *s);
static const struct sb_http_lane_hooks hooks = {.head = lane_head, .request = lane_request, .release = lane_release};

static int l_program(lua_State *L) {
  sb_http_server *s = sb_http_server_check(L, 1);
  sb_exec_lane *lane = lane_of(s);
  if (lane == NULL)
    return luaL_error(L, "lane: out of memory");
  disarm_all(lane);
  program_clear(L, lane);
  s->lane_hooks = &hooks;
  if (lua_isnoneornil(L, 2))
    return 0;
  luaL_checktype(L, 2, LUA_TTABLE);
  lua_getfield(L, 2, "token");
  size_t tn;
  const char *token = lua_tolstring(L, -1, &tn);
  if (token == NULL || tn == 0)
    return luaL_error(L, "lane program: token must be a non-empty string");
  /* no credential is longer than a request head may be: the padding's bound */
  if (sb_ct_secret_set(&lane->token, token, tn, s->limits.max_header_bytes) != 0)
    return luaL_error(L, "lane program: out of memory");
  lua_pop(L, 1);
  lane->max_key = (size_t)int_field(L, 2, "max_key_bytes");
  lane->floor_ms = int_field(L, 2, "floor_ms");
  lane->max_ms = int_field(L, 2, "max_ms");
  lane->default_ms = int_field(L, 2, "default_ms");
  lane->grace_ms = int_field(L, 2, "grace_ms");
  lane->heartbeat_ms = int_field(L, 2, "heartbeat_ms");
  lane->max_output = int_field(L, 2, "max_output");
  lane->stream_at = int_field(L, 2, "stream_at");
  lane->stream_step = int_field(L, 2, "stream_step");
  lane->reserve_margin = int_field(L, 2, "reserve_margin");
  lane->reserve_max = int_field(L, 2, "reserve_max");
  if (lane->stream_at < 0 || lane->stream_step <= 0 || lane->reserve_margin < 0 ||
      lane->reserve_max < 0)
    return luaL_error(L, "lane program: the stream's numbers must be positive");
  lua_getfield(L, 2, "held_counters"); /* optional: none held */
  lane->max_held = lua_isinteger(L, -1) && lua_tointeger(L, -1) > 0 ? (size_t)lua_tointeger(L, -1) : 0;
  lua_pop(L, 1);
  lane->default_network = str_field(L, 2, "network");
  lane->bash = str_field(L, 2, "bash");
  lua_getfield(L, 2, "env");
  luaL_checktype(L, -1, LUA_TTABLE);
  size_t n = 0;
  lua_pushnil(L);
  while (lua_next(L, -2) != 0) {
    n++;
    lua_pop(L, 1);
  }
  lane->base_env = calloc(n + 1, sizeof *lane->base_env);
  lane->base_name_len = calloc(n + 1, sizeof *lane->base_name_len);
  if (lane->base_env == NULL || lane->base_name_len == NULL)
    return luaL_error(L, "lane program: out of memory");
  lua_pushnil(L);
  while (lua_next(L, -2) != 0) {
    size_t kn, vn;
    const char *k = luaL_checklstring(L, -2, &kn);
    const char *v = luaL_checklstring(L, -1, &vn);
    char *entry = malloc(kn + vn + 2);
    if (entry == NULL)
      return luaL_error(L, "lane program: out of memory");
    memcpy(entry, k, kn);
    entry[kn] = '=';
    memcpy(entry + kn + 1, v, vn);
    entry[kn + vn + 1] = '\0';
    lane->base_name_len[lane->n_base] = kn;
    lane->base_env[lane->n_base++] = entry;
    lua_pop(L, 1);
  }
  lua_pop(L, 1);
  lua_getfield(L, 2, "headers");
  if (!lua_istable(L, -1))
    return luaL_error(L, "lane program: headers has the wrong type");
  lane->head_lines = sb_http_head_lines(L, -1, &lane->head_lines_len);
  if (lane->head_lines == NULL)
    return luaL_error(L, "lane program: out of memory");
  lua_pop(L, 1);
  lane->back_ref = ref_field(L, 2, "back", LUA_TFUNCTION);
  lane->heard_ref = ref_field(L, 2, "heard", LUA_TFUNCTION);
  /* optional: the tally (report, every report_ms; the lines' events) instead of heard per command */
  lua_getfield(L, 2, "report");
  if (lua_isfunction(L, -1)) {
    luaL_unref(L, LUA_REGISTRYINDEX, lane->report_ref); /* (its pending tally goes to the new one) */
    lane->report_ref = luaL_ref(L, LUA_REGISTRYINDEX);
    lane->report_ms = int_field(L, 2, "report_ms");
    char *request = str_field(L, 2, "log_request"), *command = str_field(L, 2, "log_command");
    free(lane->log_request);
    free(lane->log_command);
    lane->log_request = request;
    lane->log_command = command;
    lane->tally = true;
  } else {
    lua_pop(L, 1);
  }
  lane->programmed = true;
  return 0;
}

/* core.exec_lane.arm(srv, key, {socket, network, oom, pids, label?}, record) → true (false: no
 * program; label: the thread in the tallied lines). record: any Lua value, given back with each outcome of the arming (heard, back). */
static int l_arm(lua_State *L) {
  sb_http_server *s = sb_http_server_check(L, 1);
  size_t kn;
  const char *key = luaL_checklstring(L, 2, &kn);
  luaL_checktype(L, 3, LUA_TTABLE);
  sb_exec_lane *lane = s->lane;
  if (lane == NULL || !lane->programmed) {
    lua_pushboolean(L, 0);
    return 1;
  }
  lane_entry *old = entry_find(lane, key, kn);
  if (old != NULL)
    entry_disarm(lane, old);
  lane_entry *e = calloc(1, sizeof *e + kn + 1);
  if (e == NULL)
    return luaL_error(L, "lane_arm: out of memory");
  memcpy(e->key, key, kn);
  e->key_len = kn;
  e->hash = key_hash(key, kn);
  e->init_pidfd = e->oom_fd = e->pids_fd = -1;
  lua_pushvalue(L, 4);
  e->record_ref = luaL_ref(L, LUA_REGISTRYINDEX); /* (nil: LUA_REFNIL, which unref ignores) */
  lua_rawgeti(L, LUA_REGISTRYINDEX, lane->heard_ref);
  e->heard_ref = luaL_ref(L, LUA_REGISTRYINDEX);
  lua_rawgeti(L, LUA_REGISTRYINDEX, lane->back_ref);
  e->back_ref = luaL_ref(L, LUA_REGISTRYINDEX);
  e->socket = str_field(L, 3, "socket");
  e->network = str_field(L, 3, "network");
  e->oom_path = str_field(L, 3, "oom");
  e->pids_path = str_field(L, 3, "pids");
  lua_getfield(L, 3, "label"); /* the tallied lines' thread */
  if (lua_type(L, -1) == LUA_TSTRING && (e->label = strdup(lua_tostring(L, -1))) == NULL)
    return luaL_error(L, "lane_arm: out of memory");
  lua_pop(L, 1);
  e->tally = lane->tally;
  e->lane = lane;
  counters_hold(lane, e);
  /* init_pid: looked at only through a pidfd the lane would hold, one descriptor more per
   * instance than sandboxd's budget counts (sandboxd/descriptors.lua PER_INSTANCE); none is
   * held — an instance whose init ended ends its commands with it (the PID namespace goes:
   * SIGKILL, or the spawner's link lost), and a signalled command is handed back to Lua, whose
   * settle finds the instance dead */
  e->armed = true;
  e->next = lane->buckets[e->hash % LANE_BUCKETS];
  lane->buckets[e->hash % LANE_BUCKETS] = e;
  lua_pushboolean(L, 1);
  return 1;
}

/* core.exec_lane.disarm(srv [, key]) → the commands of that key (of every key) still in the lane. */
static int l_disarm(lua_State *L) {
  sb_http_server *s = sb_http_server_check(L, 1);
  sb_exec_lane *lane = s->lane;
  if (lane == NULL) {
    lua_pushinteger(L, 0);
    return 1;
  }
  if (lua_isnoneornil(L, 2)) {
    lua_pushinteger(L, disarm_all(lane));
    return 1;
  }
  size_t kn;
  const char *key = luaL_checklstring(L, 2, &kn);
  lane_entry *e = entry_find(lane, key, kn);
  if (e != NULL)
    entry_disarm(lane, e);
  /* counted over the key's entries, not the armed one: one disarmed earlier (an earlier idle
   * check) may still have commands in the lane */
  lua_pushinteger(L, key_running(lane, key, kn));
  return 1;
}

/* core.exec_lane.running(srv [, key]) → the commands in srv's lane now (of that key: walled.lua
 * counts them with the Lua path's as the instance's running commands). */
static int l_running(lua_State *L) {
  sb_http_server *s = sb_http_server_check(L, 1);
  if (lua_isnoneornil(L, 2)) {
    lua_pushinteger(L, s->lane ? s->lane->running : 0);
    return 1;
  }
  size_t kn;
  const char *key = luaL_checklstring(L, 2, &kn);
  lua_pushinteger(L, s->lane != NULL ? key_running(s->lane, key, kn) : 0);
  return 1;
}

/* core.exec_lane.collect(srv): the tally so far reported now (before a /metrics scrape, the idle
 * watch's look at the fleet's last uses, the drain's end). */
static int l_collect(lua_State *L) {
  sb_http_server *s = sb_http_server_check(L, 1);
  if (s->lane != NULL)
    report(L, s->lane);
  return 0;
}

/* The server is gone (server.c on_server_closed): the lane with it, or after its last command. */
static void lane_release(sb_http_server *s) {
  sb_exec_lane *lane = s->lane;
  s->lane = NULL;
  if (lane == NULL)
    return;
  disarm_all(lane);
  if (lane->running == 0)
    lane_free(sb_main_state(), lane);
  else
    lane->orphaned = true;
}

/* core.exec_lane.abort(srv): every command of srv's lane killed now (the drain is over: the
 * Lua path's commands are killed then too); each is handed back, aborted. */
static int l_abort(lua_State *L) {
  sb_http_server *s = sb_http_server_check(L, 1);
  for (lane_run *run = runs; run != NULL; run = run->next)
    if (run->lane == s->lane && !run->aborted) {
      run->aborted = true;
      sb_proc_abort(run->proc);
    }
  return 0;
}

/* Engine shutdown: the commands still in the lane are being killed by the supervisor's own
 * shutdown, which tells no one; their runs end here (their handles close, their memory goes). */
static void lane_shutdown(void *ud) {
  (void)ud;
  lua_State *L = sb_main_state();
  while (runs != NULL) {
    sb_proc_forget(runs->proc); /* its proc is still live: not told again */
    run_end(L, runs);
  }
  /* the report timer goes with this loop: a next run (the default loop again, at the same
   * address) makes it anew */
  if (report_loop != NULL) {
    if (!uv_is_closing((uv_handle_t *)&report_timer))
      uv_close((uv_handle_t *)&report_timer, NULL);
    report_loop = NULL;
  }
}

/* core.exec_lane.decide(body, {floor_ms, max_ms, default_ms, network, instance_network})
 * → {command, limit_ms, env} when the lane would take this body, else nil: the lane's own
 * reading of a body, for the spec and the fuzz target that hold it to routes.lua's parse
 * (tests/lua/exec_lane_spec.lua, tests/fuzz/fuzz_lane_body.c). No base env: the kernel's limits
 * are checked on the request's own. */
static int l_decide(lua_State *L) {
  size_t n;
  const char *body = luaL_checklstring(L, 1, &n);
  luaL_checktype(L, 2, LUA_TTABLE);
  sb_exec_lane lane;
  memset(&lane, 0, sizeof lane);
  lane.floor_ms = int_field(L, 2, "floor_ms");
  lane.max_ms = int_field(L, 2, "max_ms");
  lane.default_ms = int_field(L, 2, "default_ms");
  lua_getfield(L, 2, "network");
  lane.default_network = (char *)luaL_checkstring(L, -1); /* anchored by the table */
  lua_getfield(L, 2, "instance_network");
  const char *inst_network = luaL_checkstring(L, -1);
  lane_entry *e = calloc(1, sizeof *e);
  if (e == NULL)
    return luaL_error(L, "decide: out of memory");
  e->oom_fd = e->pids_fd = -1;
  e->network = (char *)inst_network;
  sb_http_request q;
  memset(&q, 0, sizeof q);
  q.body = (char *)body;
  q.body_len = n;
  int top = lua_gettop(L);
  lane_call call = {0};
  char **envp = NULL;
  bool taken = read_call(&lane, e, &q, &call) && (envp = merged_env(&lane, &call)) != NULL;
  free(e);
  if (!taken) {
    env_free(envp);
    call_free(&call);
    lua_settop(L, top);
    lua_pushnil(L);
    return 1;
  }
  lua_createtable(L, 0, 3);
  lua_pushlstring(L, call.body.command, call.body.command_len);
  call_free(&call);
  lua_setfield(L, -2, "command");
  lua_pushinteger(L, call.limit_ms);
  lua_setfield(L, -2, "limit_ms");
  lua_newtable(L);
  for (char **p = envp; *p != NULL; p++) {
    const char *eq = strchr(*p, '=');
    lua_pushlstring(L, *p, (size_t)(eq - *p));
    lua_pushstring(L, eq + 1);
    lua_rawset(L, -3);
  }
  lua_setfield(L, -2, "env");
  env_free(envp);
  return 1;
}

/* core.exec_lane.read_body(body) → {command?, network?, timeoutMs?, env?} as exec_body.c read
 * it, or nil (not mine): for the fuzz target and the spec that hold it to core.json.decode
 * (tests/fuzz/fuzz_exec_reader.c, tests/lua/exec_lane_spec.lua). */
static int l_read_body(lua_State *L) {
  size_t n;
  const char *text = luaL_checklstring(L, 1, &n);
  sb_exec_body b;
  bool mine = sb_exec_body_read(text, n, &b);
  if (!mine) {
    sb_exec_body_free(&b);
    lua_pushnil(L);
    return 1;
  }
  lua_createtable(L, 0, 4);
  int t = lua_gettop(L);
  if (b.command != NULL) {
    lua_pushlstring(L, b.command, b.command_len);
    lua_setfield(L, t, "command");
  }
  if (b.network != NULL) {
    lua_pushlstring(L, b.network, b.network_len);
    lua_setfield(L, t, "network");
  }
  if (b.has_timeout) {
    lua_pushnumber(L, b.timeout_ms);
    lua_setfield(L, t, "timeoutMs");
  }
  if (b.has_env) {
    lua_createtable(L, 0, (int)b.n_env);
    for (size_t i = 0; i < b.n_env; i++) {
      lua_pushlstring(L, b.env[i].name, b.env[i].name_len);
      lua_pushlstring(L, b.env[i].value, b.env[i].value_len);
      lua_rawset(L, -3);
    }
    lua_setfield(L, t, "env");
  }
  sb_exec_body_free(&b);
  return 1;
}

int sb_exec_lane_open(lua_State *L) {
  sb_shutdown_register(lane_shutdown, NULL);
  static const luaL_Reg fns[] = {{"program", l_program}, {"arm", l_arm}, {"disarm", l_disarm},
                                 {"running", l_running}, {"abort", l_abort}, {"collect", l_collect},
                                 {"decide", l_decide}, {"read_body", l_read_body},
                                 {NULL, NULL}};
  luaL_newlib(L, fns);
  lua_setfield(L, -2, "exec_lane");
  return 0;
}
