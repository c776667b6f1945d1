/* The process's terminal, for a front that draws on it (fronts/console.lua): C moves bytes,
 * Lua decides what a key means and what the screen shows.
 *
 * core.tty_size([fd]) → columns, rows of the terminal on fd (default 1, standard output), or
 * nil, err when fd is not a terminal. A resize arrives as core.on_signal("WINCH", fn).
 *
 * core.tty_mode("raw" | "normal") switches standard input (which must be a terminal) between
 * the terminal's own line editing ("normal") and key-at-a-time input without echo ("raw":
 * libuv's raw mode, so Enter arrives as "\r", with ISIG put back so that Ctrl-C, Ctrl-Z and
 * Ctrl-\ still send their signals — the console's Ctrl-C stays the SIGINT it always was).
 * Returns true, or nil, err.
 *
 * A terminal left without echo is a serious bug for the person at it, so once raw mode was set
 * the terminal's original mode comes back on every way out the process has: "normal" from
 * Lua, the engine's shutdown (the binary's normal exit, a Lua error, TERM/INT through the
 * console's drain), and exit() from anywhere (atexit). uv_tty_reset_mode is async-signal-safe
 * and restores the attributes libuv saved before its first change. Only SIGKILL and a crash
 * leave the terminal raw (`stty sane` or `reset` then fix it). */
#include "io.h"
#include "../engine/engine.h"

#include <errno.h>
#include <stdlib.h>
#include <string.h>
#include <sys/ioctl.h>
#include <termios.h>

static struct {
  bool restore_registered; /* the shutdown callback and the atexit hook are in place */
} T;

static void restore_terminal(void) { (void)uv_tty_reset_mode(); }

static void restore_at_shutdown(void *ud) {
  (void)ud;
  restore_terminal();
}

/* Once per process, before the first change: every later way out restores the mode. */
static bool register_restore(void) {
  if (T.restore_registered)
    return true;
  if (atexit(restore_terminal) != 0 || !sb_shutdown_register(restore_at_shutdown, NULL))
    return false;
  T.restore_registered = true;
  return true;
}

static int l_tty_size(lua_State *L) {
  lua_Integer fd = luaL_optinteger(L, 1, 1);
  struct winsize ws;
  memset(&ws, 0, sizeof ws);
  if (fd < 0 || fd > 1024 || ioctl((int)fd, TIOCGWINSZ, &ws) != 0)
    return sb_push_fail(L, "io", "not a terminal: its size is unknown");
  if (ws.ws_col == 0) /* a terminal that does not say (a bare pty): callers fall back */
    return sb_push_fail(L, "io", "the terminal does not report its size");
  lua_pushinteger(L, ws.ws_col);
  lua_pushinteger(L, ws.ws_row);
  return 2;
}

/* libuv's raw mode turns ISIG off; put it back so the signal keys keep their meaning. */
static int keep_signal_keys(uv_tty_t *tty) {
  uv_os_fd_t fd;
  int rc = uv_fileno((uv_handle_t *)tty, &fd);
  if (rc != 0)
    return rc;
  struct termios t;
  if (tcgetattr(fd, &t) != 0)
    return uv_translate_sys_error(errno);
  t.c_lflag |= ISIG;
  do
    rc = tcsetattr(fd, TCSADRAIN, &t);
  while (rc != 0 && errno == EINTR);
  return rc == 0 ? 0 : uv_translate_sys_error(errno);
}

static int l_tty_mode(lua_State *L) {
  static const char *const modes[] = {"normal", "raw", NULL};
  int raw = luaL_checkoption(L, 1, NULL, modes);
  uv_tty_t *tty = sb_stdin_tty();
  if (tty == NULL)
    return sb_push_fail(L, "io", "standard input is not a terminal: its mode cannot be set");
  if (raw && !register_restore())
    return sb_push_fail(L, "io", "out of memory registering the terminal's restore");
  int rc = uv_tty_set_mode(tty, raw ? UV_TTY_MODE_RAW : UV_TTY_MODE_NORMAL);
  if (rc == 0 && raw)
    rc = keep_signal_keys(tty);
  if (rc != 0) {
    if (raw)
      (void)uv_tty_set_mode(tty, UV_TTY_MODE_NORMAL);
    lua_pushnil(L);
    sb_error_push(L, "io", uv_strerror(rc));
    return 2;
  }
  lua_pushboolean(L, 1);
  return 1;
}

int sb_tty_open(lua_State *L) {
  static const luaL_Reg fns[] = {{"tty_size", l_tty_size}, {"tty_mode", l_tty_mode}, {NULL, NULL}};
  luaL_setfuncs(L, fns, 0);
  return 0;
}
