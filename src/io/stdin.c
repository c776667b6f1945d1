/* The process's own standard input, read without blocking the loop: core.read_stdin([signal])
 * yields until bytes arrive and returns them, or nil at end of input. A terminal or a pipe is
 * read through libuv; a regular file (`< file`) cannot be polled, and reading it is
 * immediate, so it is read directly. core.isatty(fd) tells a terminal apart. */
#include "io.h"
#include "../engine/engine.h"

#include <errno.h>
#include <stdlib.h>
#include <unistd.h>

enum { FILE_CHUNK = 64 * 1024 };

static struct {
  bool opened, eof, is_file;
  union {
    uv_tty_t tty;
    uv_pipe_t pipe;
  } h;
  lua_State *waiter;
  sb_abort_listener on_abort;
  sb_abort *fired_by;
  int signal_ref;
  char buf[FILE_CHUNK];
} S = {.signal_ref = LUA_NOREF};

static uv_stream_t *stream(void) { return (uv_stream_t *)&S.h; }

static bool open_stdin(void) {
  switch (uv_guess_handle(0)) {
  case UV_TTY:
    return uv_tty_init(sb_loop(), &S.h.tty, 0, 1) == 0;
  case UV_NAMED_PIPE:
  case UV_TCP:
    return uv_pipe_init(sb_loop(), &S.h.pipe, 0) == 0 && uv_pipe_open(&S.h.pipe, 0) == 0;
  default:
    S.is_file = true; /* a regular file, /dev/null, or nothing at all */
    return true;
  }
}

static void alloc_buf(uv_handle_t *h, size_t suggested, uv_buf_t *buf) {
  (void)h;
  (void)suggested;
  *buf = uv_buf_init(S.buf, sizeof S.buf);
}

static void finish(lua_State *task, const char *bytes, ssize_t n) {
  S.waiter = NULL;
  sb_abort *sig = S.fired_by;
  S.fired_by = NULL;
  sb_abort_unlisten(&S.on_abort);
  int nargs = 1;
  if (sig != NULL)
    nargs = sb_abort_push_fail(task, sig);
  else if (n > 0)
    lua_pushlstring(task, bytes, (size_t)n);
  else
    lua_pushnil(task);
  luaL_unref(sb_main_state(), LUA_REGISTRYINDEX, S.signal_ref);
  S.signal_ref = LUA_NOREF;
  sb_task_complete(task, nargs);
}

static void on_read(uv_stream_t *s, ssize_t nread, const uv_buf_t *buf) {
  if (nread == 0)
    return;
  uv_read_stop(s); /* read only while someone waits: no buffering, no lost bytes */
  if (nread < 0)
    S.eof = true;
  if (S.waiter != NULL)
    finish(S.waiter, buf->base, nread);
}

static void aborted(sb_abort_listener *l, sb_abort *sig) {
  (void)l;
  if (S.waiter == NULL)
    return;
  if (!S.is_file)
    uv_read_stop(stream());
  S.fired_by = sig;
  finish(S.waiter, NULL, 0);
}

static int l_read_stdin(lua_State *L) {
  sb_abort *sig = sb_abort_opt(L, 1);
  if (S.waiter != NULL)
    return luaL_error(L, "core.read_stdin: another task is already reading standard input");
  if (!S.opened) {
    if (!open_stdin())
      return sb_push_fail(L, "io", "standard input cannot be read");
    S.opened = true;
  }
  if (S.eof) {
    lua_pushnil(L);
    return 1;
  }
  if (S.is_file) {
    ssize_t n;
    do
      n = read(0, S.buf, sizeof S.buf);
    while (n < 0 && errno == EINTR);
    if (n <= 0) {
      S.eof = true;
      lua_pushnil(L);
    } else {
      lua_pushlstring(L, S.buf, (size_t)n);
    }
    return 1;
  }
  sb_task_check(L, "core.read_stdin");
  if (sig != NULL && sb_abort_fired(sig))
    return sb_abort_push_fail(L, sig);
  if (uv_read_start(stream(), alloc_buf, on_read) != 0) {
    S.eof = true;
    lua_pushnil(L);
    return 1;
  }
  S.waiter = L;
  if (sig != NULL) {
    lua_pushvalue(L, 1);
    S.signal_ref = luaL_ref(L, LUA_REGISTRYINDEX);
    sb_abort_listen(sig, &S.on_abort, aborted);
  }
  return sb_task_yield(L);
}

uv_tty_t *sb_stdin_tty(void) {
  if (!S.opened) {
    if (!open_stdin())
      return NULL;
    S.opened = true;
  }
  return !S.is_file && ((uv_handle_t *)&S.h)->type == UV_TTY ? &S.h.tty : NULL;
}

static int l_isatty(lua_State *L) {
  lua_Integer fd = luaL_optinteger(L, 1, 1);
  lua_pushboolean(L, fd >= 0 && fd <= 1024 && isatty((int)fd));
  return 1;
}

int sb_stdin_open(lua_State *L) {
  static const luaL_Reg fns[] = {{"read_stdin", l_read_stdin}, {"isatty", l_isatty}, {NULL, NULL}};
  luaL_setfuncs(L, fns, 0);
  return 0;
}
