/* core.store: one SQLite database file, its queries run off the loop (docs/engine.md).
 *
 *   core.store.open(path) → db | nil, err       opens (creates) the file: WAL journal,
 *                                               synchronous=NORMAL (a commit survives the
 *                                               process being killed; only a power cut can lose
 *                                               the last ones), foreign keys on; the file and
 *                                               its -wal, -shm and -journal are 0600 whatever
 *                                               the umask
 *   db:run(sql, ...) → rows, info | nil, err    one statement; ? parameters bound from the
 *                                               values after it (nil, boolean, number, string)
 *   db:batch{{sql, p1, …, n = k}, …} → {rows…}, info | nil, err
 *                                               statements in one transaction (BEGIN
 *                                               IMMEDIATE … COMMIT; a failure rolls all back)
 *   db:close()                                  after the queries already asked for
 *
 * rows is an array of tables keyed by column name (NULL columns are absent); info holds
 * `changes` and `last_id` of the last statement. Both wait: the calling task yields while a
 * libuv thread-pool worker runs the statements. One connection, one query at a time per
 * database (a FIFO): the database has one writer, and a batch is never interleaved with
 * another task's statements. Every value crosses threads as a C copy: no worker touches Lua.
 */
#include "store.h"

#include "../engine/engine.h"
#include "../engine/list.h"

#include <fcntl.h>
#include <lauxlib.h>
#include <sqlite3.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#define STORE_MT "switchboard.store"
#define GUARD_MT "switchboard.store.guard"

typedef struct value {
  int type; /* SQLITE_NULL, SQLITE_INTEGER, SQLITE_FLOAT, SQLITE_TEXT */
  sqlite3_int64 i;
  double d;
  char *s; /* owned; s[n] == 0 */
  size_t n;
} value;

typedef struct statement {
  char *sql; /* owned */
  value *params; /* owned, nparams of them */
  int nparams;
  /* results, filled by the worker */
  int ncols;
  char **names;  /* owned, ncols */
  value *cells;  /* owned, nrows * ncols */
  size_t nrows, cap_rows;
} statement;

typedef struct store store;

typedef struct job {
  uv_work_t req;
  store *db;
  lua_State *task;
  statement *st; /* owned, nst */
  int nst;
  bool batch;
  /* results */
  int rc;
  char *error; /* owned: sqlite's message */
  sqlite3_int64 changes, last_id;
  struct job *next; /* the database's FIFO */
} job;

struct store {
  sqlite3 *conn;
  job *head, *tail; /* waiting jobs; head is running when `running` */
  bool running;
  bool closing;  /* close asked for: close when the FIFO is empty */
  bool orphaned; /* the userdata was collected: free when the FIFO is empty */
  int self_ref;  /* keeps the userdata alive while jobs are queued */
  store *prev, *next; /* the live list, for shutdown */
};

typedef struct handle {
  store *db;
} handle;

static store *live; /* open databases, for shutdown */

/* ---- values -------------------------------------------------------------------------- */

static void value_free(value *v) {
  if (v->type == SQLITE_TEXT)
    free(v->s);
}

static void statement_free(statement *st) {
  free(st->sql);
  for (int i = 0; i < st->nparams; i++)
    value_free(&st->params[i]);
  free(st->params);
  for (int i = 0; i < st->ncols; i++)
    free(st->names[i]);
  free(st->names);
  for (size_t i = 0; i < st->nrows * (size_t)st->ncols; i++)
    value_free(&st->cells[i]);
  free(st->cells);
}

static void job_free(job *j) {
  for (int i = 0; i < j->nst; i++)
    statement_free(&j->st[i]);
  free(j->st);
  free(j->error);
  free(j);
}

static char *copy_bytes(const char *s, size_t n) {
  char *c = malloc(n + 1);
  if (c != NULL) {
    memcpy(c, s, n);
    c[n] = 0;
  }
  return c;
}

/* Copies the Lua value at idx into v; raises on a type that has no column. */
static void value_from_lua(lua_State *L, int idx, value *v, int pos) {
  switch (lua_type(L, idx)) {
  case LUA_TNIL:
  case LUA_TNONE:
    v->type = SQLITE_NULL;
    break;
  case LUA_TBOOLEAN:
    v->type = SQLITE_INTEGER;
    v->i = lua_toboolean(L, idx);
    break;
  case LUA_TNUMBER:
    if (lua_isinteger(L, idx)) {
      v->type = SQLITE_INTEGER;
      v->i = lua_tointeger(L, idx);
    } else {
      v->type = SQLITE_FLOAT;
      v->d = lua_tonumber(L, idx);
    }
    break;
  case LUA_TSTRING: {
    size_t n;
    const char *s = lua_tolstring(L, idx, &n);
    v->s = copy_bytes(s, n);
    if (v->s == NULL)
      luaL_error(L, "out of memory");
    v->type = SQLITE_TEXT;
    v->n = n;
    break;
  }
  default:
    luaL_error(L, "core.store: parameter %d is a %s (nil, boolean, number or string expected)", pos,
               luaL_typename(L, idx));
  }
}

static void value_push(lua_State *L, const value *v) {
  switch (v->type) {
  case SQLITE_INTEGER:
    lua_pushinteger(L, (lua_Integer)v->i);
    break;
  case SQLITE_FLOAT:
    lua_pushnumber(L, v->d);
    break;
  case SQLITE_TEXT:
    lua_pushlstring(L, v->s, v->n);
    break;
  default:
    lua_pushnil(L);
  }
}

/* ---- the worker (a thread-pool thread: no Lua here) ----------------------------------- */

static int bind_all(sqlite3_stmt *s, statement *st) {
  for (int i = 0; i < st->nparams; i++) {
    value *v = &st->params[i];
    int rc;
    if (v->type == SQLITE_INTEGER)
      rc = sqlite3_bind_int64(s, i + 1, v->i);
    else if (v->type == SQLITE_FLOAT)
      rc = sqlite3_bind_double(s, i + 1, v->d);
    else if (v->type == SQLITE_TEXT)
      rc = sqlite3_bind_text64(s, i + 1, v->s, v->n, SQLITE_STATIC, SQLITE_UTF8);
    else
      rc = sqlite3_bind_null(s, i + 1);
    if (rc != SQLITE_OK)
      return rc;
  }
  return SQLITE_OK;
}

static int keep_row(sqlite3_stmt *s, statement *st) {
  if (st->names == NULL) {
    st->ncols = sqlite3_column_count(s);
    st->names = calloc((size_t)st->ncols + 1, sizeof *st->names);
    if (st->names == NULL)
      return SQLITE_NOMEM;
    for (int c = 0; c < st->ncols; c++) {
      const char *name = sqlite3_column_name(s, c);
      st->names[c] = copy_bytes(name ? name : "?", name ? strlen(name) : 1);
      if (st->names[c] == NULL)
        return SQLITE_NOMEM;
    }
  }
  if (st->nrows == st->cap_rows) {
    size_t cap = st->cap_rows ? st->cap_rows * 2 : 8;
    value *grown = realloc(st->cells, cap * (size_t)(st->ncols ? st->ncols : 1) * sizeof *grown);
    if (grown == NULL)
      return SQLITE_NOMEM;
    st->cells = grown;
    st->cap_rows = cap;
  }
  value *row = &st->cells[st->nrows * (size_t)st->ncols];
  for (int c = 0; c < st->ncols; c++) {
    value *v = &row[c];
    memset(v, 0, sizeof *v);
    int t = sqlite3_column_type(s, c);
    if (t == SQLITE_INTEGER) {
      v->type = SQLITE_INTEGER;
      v->i = sqlite3_column_int64(s, c);
    } else if (t == SQLITE_FLOAT) {
      v->type = SQLITE_FLOAT;
      v->d = sqlite3_column_double(s, c);
    } else if (t == SQLITE_TEXT || t == SQLITE_BLOB) {
      const void *p = t == SQLITE_TEXT ? (const void *)sqlite3_column_text(s, c) : sqlite3_column_blob(s, c);
      size_t n = (size_t)sqlite3_column_bytes(s, c);
      v->s = copy_bytes(p ? p : "", p ? n : 0);
      if (v->s == NULL)
        return SQLITE_NOMEM;
      v->type = SQLITE_TEXT;
      v->n = p ? n : 0;
    } else {
      v->type = SQLITE_NULL;
    }
  }
  st->nrows++;
  return SQLITE_OK;
}

static int run_one(sqlite3 *conn, statement *st) {
  sqlite3_stmt *s = NULL;
  int rc = sqlite3_prepare_v2(conn, st->sql, -1, &s, NULL);
  if (rc != SQLITE_OK)
    goto done;
  rc = bind_all(s, st);
  if (rc != SQLITE_OK)
    goto done;
  while ((rc = sqlite3_step(s)) == SQLITE_ROW) {
    rc = keep_row(s, st);
    if (rc != SQLITE_OK)
      goto done;
  }
  if (rc == SQLITE_DONE)
    rc = SQLITE_OK;
done:
  sqlite3_finalize(s);
  return rc;
}

static void work(uv_work_t *req) {
  job *j = req->data;
  sqlite3 *conn = j->db->conn;
  int rc = SQLITE_OK;
  if (j->batch)
    rc = sqlite3_exec(conn, "BEGIN IMMEDIATE", NULL, NULL, NULL);
  for (int i = 0; rc == SQLITE_OK && i < j->nst; i++)
    rc = run_one(conn, &j->st[i]);
  if (rc != SQLITE_OK) {
    const char *msg = sqlite3_errmsg(conn);
    j->error = copy_bytes(msg, strlen(msg));
    if (j->batch && !sqlite3_get_autocommit(conn))
      sqlite3_exec(conn, "ROLLBACK", NULL, NULL, NULL);
  } else if (j->batch) {
    rc = sqlite3_exec(conn, "COMMIT", NULL, NULL, NULL);
    if (rc != SQLITE_OK) {
      const char *msg = sqlite3_errmsg(conn);
      j->error = copy_bytes(msg, strlen(msg));
      sqlite3_exec(conn, "ROLLBACK", NULL, NULL, NULL);
    }
  }
  j->rc = rc;
  j->changes = sqlite3_changes64(conn);
  j->last_id = sqlite3_last_insert_rowid(conn);
}

/* ---- the loop side -------------------------------------------------------------------- */

static void store_release(store *db) {
  if (db->conn != NULL) {
    sqlite3_close_v2(db->conn);
    db->conn = NULL;
  }
  SB_LIST_REMOVE(live, db);
}

static void start_next(store *db);

static void push_results(lua_State *T, job *j) {
  lua_createtable(T, j->nst, 0);
  for (int i = 0; i < j->nst; i++) {
    statement *st = &j->st[i];
    lua_createtable(T, (int)st->nrows, 0);
    for (size_t r = 0; r < st->nrows; r++) {
      lua_createtable(T, 0, st->ncols);
      for (int c = 0; c < st->ncols; c++) {
        value *v = &st->cells[r * (size_t)st->ncols + c];
        if (v->type == SQLITE_NULL)
          continue;
        value_push(T, v);
        lua_setfield(T, -2, st->names[c]);
      }
      lua_rawseti(T, -2, (lua_Integer)r + 1);
    }
    lua_rawseti(T, -2, i + 1);
  }
  if (!j->batch) { /* run: the one statement's rows */
    lua_rawgeti(T, -1, 1);
    lua_remove(T, -2);
  }
  lua_createtable(T, 0, 2);
  lua_pushinteger(T, (lua_Integer)j->changes);
  lua_setfield(T, -2, "changes");
  lua_pushinteger(T, (lua_Integer)j->last_id);
  lua_setfield(T, -2, "last_id");
}

static void after_work(uv_work_t *req, int status) {
  job *j = req->data;
  store *db = j->db;
  db->head = j->next;
  if (db->head == NULL)
    db->tail = NULL;
  db->running = false;
  lua_State *T = j->task;
  int nargs;
  if (status == UV_ECANCELED) {
    nargs = sb_push_fail(T, "store", "the query was cancelled: switchboard is shutting down");
  } else if (j->rc != SQLITE_OK) {
    nargs = sb_push_fail(T, "store", j->error ? j->error : sqlite3_errstr(j->rc));
    lua_pushinteger(T, j->rc);
    lua_setfield(T, -2, "code");
  } else {
    push_results(T, j);
    nargs = 2;
  }
  job_free(j);
  start_next(db);
  sb_task_complete(T, nargs);
}

/* Starts the FIFO's head when nothing runs; closes or frees a database whose FIFO emptied. */
static void start_next(store *db) {
  if (db->running)
    return;
  if (db->head != NULL) {
    db->running = true;
    db->head->req.data = db->head;
    if (uv_queue_work(sb_loop(), &db->head->req, work, after_work) != 0) {
      db->running = false; /* cannot happen with a live loop; fail the job rather than hang */
      job *j = db->head;
      db->head = j->next;
      if (db->head == NULL)
        db->tail = NULL;
      lua_State *T = j->task;
      job_free(j);
      sb_task_complete(T, sb_push_fail(T, "store", "the query could not be queued"));
      start_next(db);
    }
    return;
  }
  lua_State *L = sb_main_state();
  if (db->self_ref != LUA_NOREF && L != NULL) {
    luaL_unref(L, LUA_REGISTRYINDEX, db->self_ref);
    db->self_ref = LUA_NOREF;
  }
  if (db->closing || db->orphaned)
    store_release(db);
  if (db->orphaned)
    free(db);
}

static handle *check_handle(lua_State *L) {
  handle *h = luaL_checkudata(L, 1, STORE_MT);
  if (h->db == NULL || h->db->closing || h->db->conn == NULL)
    luaL_error(L, "core.store: the database is closed");
  return h;
}

/* Reads the statement table at idx ({sql, p1, …, n = k}) into st. */
static void statement_from_table(lua_State *L, int idx, statement *st) {
  luaL_checktype(L, idx, LUA_TTABLE);
  lua_rawgeti(L, idx, 1);
  size_t n;
  const char *sql = luaL_checklstring(L, -1, &n);
  st->sql = copy_bytes(sql, n);
  lua_pop(L, 1);
  lua_getfield(L, idx, "n");
  lua_Integer count = lua_isinteger(L, -1) ? lua_tointeger(L, -1) : (lua_Integer)lua_rawlen(L, idx);
  lua_pop(L, 1);
  if (st->sql == NULL || count < 1 || count > 1000)
    luaL_error(L, "core.store: a statement is {sql, params…, n = count} with at most 999 parameters");
  st->nparams = (int)count - 1;
  st->params = sb_calloc(L, (size_t)st->nparams + 1, sizeof *st->params);
  for (int i = 0; i < st->nparams; i++) {
    lua_rawgeti(L, idx, i + 2);
    value_from_lua(L, -1, &st->params[i], i + 1);
    lua_pop(L, 1);
  }
}

/* The job is anchored in a to-be-closed-free way: a raise while reading parameters frees it
 * through the userdata below (its __gc), so nothing leaks on a programmer error. */
typedef struct job_guard {
  job *j;
} job_guard;

static int guard_gc(lua_State *L) {
  job_guard *g = lua_touserdata(L, 1);
  if (g->j != NULL)
    job_free(g->j);
  g->j = NULL;
  return 0;
}

static job *new_job(lua_State *L, store *db, int nst, bool batch) {
  job_guard *g = lua_newuserdatauv(L, sizeof *g, 0);
  g->j = NULL;
  luaL_setmetatable(L, GUARD_MT);
  job *j = sb_calloc(L, 1, sizeof *j);
  g->j = j; /* from here a raise frees it */
  j->st = sb_calloc(L, (size_t)nst, sizeof *j->st);
  j->nst = nst;
  j->db = db;
  j->batch = batch;
  return j;
}

static int enqueue(lua_State *L, store *db, job *j, int guard_idx, int self_idx) {
  job_guard *g = lua_touserdata(L, guard_idx);
  g->j = NULL; /* the FIFO owns it now */
  j->task = L;
  SB_QUEUE_APPEND(db->head, db->tail, j);
  if (db->self_ref == LUA_NOREF) {
    lua_pushvalue(L, self_idx);
    db->self_ref = luaL_ref(L, LUA_REGISTRYINDEX);
  }
  start_next(db);
  return sb_task_yield(L);
}

static int l_run(lua_State *L) {
  handle *h = check_handle(L);
  size_t n;
  const char *sql = luaL_checklstring(L, 2, &n);
  int top = lua_gettop(L);
  sb_task_check(L, "db:run");
  luaL_argcheck(L, top - 2 <= 999, 3, "at most 999 parameters");
  job *j = new_job(L, h->db, 1, false);
  int guard_idx = lua_gettop(L);
  statement *st = &j->st[0];
  st->sql = copy_bytes(sql, n);
  st->nparams = top - 2;
  st->params = calloc((size_t)st->nparams + 1, sizeof *st->params);
  if (st->sql == NULL || st->params == NULL)
    return luaL_error(L, "out of memory");
  for (int i = 0; i < st->nparams; i++)
    value_from_lua(L, 3 + i, &st->params[i], i + 1);
  return enqueue(L, h->db, j, guard_idx, 1);
}

static int l_batch(lua_State *L) {
  handle *h = check_handle(L);
  luaL_checktype(L, 2, LUA_TTABLE);
  sb_task_check(L, "db:batch");
  lua_Integer nst = (lua_Integer)lua_rawlen(L, 2);
  luaL_argcheck(L, nst >= 1 && nst <= 10000, 2, "1 to 10000 statements expected");
  job *j = new_job(L, h->db, (int)nst, true);
  int guard_idx = lua_gettop(L);
  for (int i = 0; i < nst; i++) {
    lua_rawgeti(L, 2, i + 1);
    statement_from_table(L, lua_gettop(L), &j->st[i]);
    lua_pop(L, 1);
  }
  return enqueue(L, h->db, j, guard_idx, 1);
}

static int l_close(lua_State *L) {
  handle *h = luaL_checkudata(L, 1, STORE_MT);
  store *db = h->db;
  if (db == NULL || db->closing)
    return 0;
  db->closing = true;
  start_next(db); /* closes now when idle, else when the FIFO empties */
  return 0;
}

static int l_gc(lua_State *L) {
  handle *h = luaL_checkudata(L, 1, STORE_MT);
  store *db = h->db;
  h->db = NULL;
  if (db == NULL)
    return 0;
  db->orphaned = true;
  if (!db->running && db->head == NULL) {
    store_release(db);
    free(db);
  }
  return 0;
}

/* The database holds what people asked and what their commands printed: it is the owner's
 * alone. SQLite creates a new file 0644 less the umask (0644 under the usual 022), and its
 * -wal, -shm and -journal with the database's own mode. So the database is created here
 * 0600 before SQLite opens it, and an older, wider one and the side files an older run left
 * are narrowed. An existing file is changed by its path, never opened: closing a descriptor
 * of it would drop the POSIX locks another connection of this process holds on it. A failure
 * here (not the owner, no directory) is left for SQLite's open to report. */
static void own_files_only(const char *path) {
  static const char *const suffixes[] = {"", "-wal", "-shm", "-journal"};
  char side[4096];
  if (strcmp(path, ":memory:") == 0 || strncmp(path, "file:", 5) == 0)
    return; /* not a plain file name: SQLite's to interpret */
  int fd = open(path, O_RDWR | O_CREAT | O_EXCL | O_CLOEXEC, 0600);
  if (fd >= 0) { /* new, so nobody holds a lock on it */
    (void)fchmod(fd, 0600);
    close(fd);
  }
  for (size_t i = 0; i < sizeof suffixes / sizeof suffixes[0]; i++) {
    struct stat st;
    if (snprintf(side, sizeof side, "%s%s", path, suffixes[i]) >= (int)sizeof side)
      return;
    if (stat(side, &st) == 0 && S_ISREG(st.st_mode) && (st.st_mode & 0777) != 0600)
      (void)chmod(side, 0600);
  }
}

static int l_open(lua_State *L) {
  const char *path = luaL_checkstring(L, 1);
  handle *h = lua_newuserdatauv(L, sizeof *h, 0);
  h->db = NULL;
  luaL_setmetatable(L, STORE_MT);
  store *db = sb_calloc(L, 1, sizeof *db);
  db->self_ref = LUA_NOREF;
  h->db = db;
  SB_LIST_PUSH(live, db);
  own_files_only(path);
  int rc = sqlite3_open_v2(path, &db->conn,
                           SQLITE_OPEN_READWRITE | SQLITE_OPEN_CREATE | SQLITE_OPEN_FULLMUTEX, NULL);
  if (rc == SQLITE_OK)
    rc = sqlite3_exec(db->conn,
                      "PRAGMA journal_mode=WAL; PRAGMA synchronous=NORMAL; "
                      "PRAGMA foreign_keys=ON; PRAGMA busy_timeout=5000;",
                      NULL, NULL, NULL);
  if (rc != SQLITE_OK) {
    char msg[512];
    snprintf(msg, sizeof msg, "cannot open the database %s: %s", path,
             db->conn ? sqlite3_errmsg(db->conn) : sqlite3_errstr(rc));
    db->closing = true;
    start_next(db);
    return sb_push_fail(L, "store", msg);
  }
  return 1;
}

/* Engine shutdown: queued queries are dropped (their tasks are never resumed); the running one
 * finishes in its worker and its after_work frees it when the loop runs the last time. */
static void store_shutdown(void *ud) {
  (void)ud;
  for (store *db = live; db != NULL; db = db->next) {
    job *j = db->running ? db->head->next : db->head;
    if (db->running)
      db->head->next = NULL, db->tail = db->head;
    else
      db->head = db->tail = NULL;
    while (j != NULL) {
      job *next = j->next;
      job_free(j);
      j = next;
    }
    db->closing = true;
  }
  for (store *db = live, *next; db != NULL; db = next) {
    next = db->next;
    if (!db->running)
      store_release(db);
  }
}

int sb_store_open(lua_State *L) {
  sb_shutdown_register(store_shutdown, NULL);
  static const luaL_Reg methods[] = {
      {"run", l_run}, {"batch", l_batch}, {"close", l_close}, {NULL, NULL}};
  static const luaL_Reg meta[] = {{"__gc", l_gc}, {NULL, NULL}};
  sb_class_register(L, &(sb_class){STORE_MT, methods, NULL, meta});
  static const luaL_Reg guard_meta[] = {{"__gc", guard_gc}, {NULL, NULL}};
  sb_class_register(L, &(sb_class){GUARD_MT, NULL, NULL, guard_meta});
  static const luaL_Reg fns[] = {{"open", l_open}, {NULL, NULL}};
  sb_module_table(L, "store", fns);
  return 0;
}
