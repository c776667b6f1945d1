/* core.notify (see notify.h). One blocking sendto per message on a datagram socket: the
 * receiver is the service manager on the same host, a datagram is never partial, and a
 * message is a few dozen bytes sent a handful of times in a process's life, so it does not
 * go through the event loop. */
#include "notify/notify.h"

#include "engine/engine.h"

#include <errno.h>
#include <lauxlib.h>
#include <stddef.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <sys/un.h>
#include <time.h>
#include <unistd.h>

/* Fills addr from $NOTIFY_SOCKET ("/path" or "@abstract"); returns its length in bytes, 0
 * when the variable is unset or empty, -1 when it names no usable address (why in *why). */
static socklen_t notify_address(struct sockaddr_un *addr, const char **why) {
  const char *path = getenv("NOTIFY_SOCKET");
  if (path == NULL || path[0] == '\0')
    return 0;
  size_t len = strlen(path);
  if (path[0] != '/' && path[0] != '@') {
    *why = "NOTIFY_SOCKET is neither an absolute path nor an abstract name (@…)";
    return (socklen_t)-1;
  }
  if (len >= sizeof addr->sun_path) {
    *why = "NOTIFY_SOCKET is longer than a unix socket address";
    return (socklen_t)-1;
  }
  memset(addr, 0, sizeof *addr);
  addr->sun_family = AF_UNIX;
  memcpy(addr->sun_path, path, len);
  if (path[0] == '@')
    addr->sun_path[0] = '\0'; /* the abstract namespace: no NUL terminator counted */
  return (socklen_t)(offsetof(struct sockaddr_un, sun_path) + len + (path[0] == '/' ? 1 : 0));
}

static int notify_send(lua_State *L) {
  size_t len = 0;
  const char *text = luaL_checklstring(L, 1, &len);
  struct sockaddr_un addr;
  const char *why = NULL;
  socklen_t addr_len = notify_address(&addr, &why);
  if (addr_len == 0) {
    lua_pushboolean(L, 0);
    return 1;
  }
  if (addr_len == (socklen_t)-1)
    return sb_push_fail(L, "transport", why);
  /* CLOEXEC: never leaks into a command spawned at the same moment on another thread. */
  int fd = socket(AF_UNIX, SOCK_DGRAM | SOCK_CLOEXEC, 0);
  if (fd < 0)
    return sb_push_fail(L, "transport", strerror(errno));
  ssize_t sent;
  do
    sent = sendto(fd, text, len, MSG_NOSIGNAL, (const struct sockaddr *)&addr, addr_len);
  while (sent < 0 && errno == EINTR);
  int saved = errno;
  close(fd);
  if (sent < 0) {
    char message[160];
    snprintf(message, sizeof message, "cannot send to NOTIFY_SOCKET: %s", strerror(saved));
    return sb_push_fail(L, "transport", message);
  }
  lua_pushboolean(L, 1);
  return 1;
}

/* CLOCK_MONOTONIC in µs: systemd compares RELOADING=1's MONOTONIC_USEC with its own clock. */
static int notify_monotonic_usec(lua_State *L) {
  struct timespec ts;
  clock_gettime(CLOCK_MONOTONIC, &ts);
  lua_pushinteger(L, (lua_Integer)ts.tv_sec * 1000000 + ts.tv_nsec / 1000);
  return 1;
}

int sb_notify_open(lua_State *L) {
  static const luaL_Reg fns[] = {
      {"send", notify_send},
      {"monotonic_usec", notify_monotonic_usec},
      {NULL, NULL},
  };
  luaL_newlib(L, fns);
  lua_setfield(L, -2, "notify");
  return 0;
}
