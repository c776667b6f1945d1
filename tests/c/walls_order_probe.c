/* A client of an instance's spawner (src/walls/request.h) for tests/lua/walls_spawn_spec.lua:
 * N commands in turn on one connection, each with a fresh pipe for its stdout; after each, the
 * probe reads that pipe to its EOF and then looks, without waiting, whether the command's reply
 * is already on the socket. The spawner holds its copy of a command's stdout until it has sent
 * the reply (spawner.c, command_ended), so a client's loop sees both in one wakeup: every
 * command should count. (Before that, the pipe ended as the command died and the reply came a
 * few context switches later: most did not.)
 *
 *   walls_order_probe SOCKET N PROGRAM ARG...      prints {"n":N,"reply_at_eof":K,"errors":E} */
#ifndef _GNU_SOURCE
#define _GNU_SOURCE
#endif
#include <errno.h>
#include <fcntl.h>
#include <poll.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <sys/un.h>
#include <unistd.h>

#include "walls/request.h"

static int connect_to(const char *path) {
  struct sockaddr_un a;
  memset(&a, 0, sizeof a);
  a.sun_family = AF_UNIX;
  if (strlen(path) >= sizeof a.sun_path)
    return -1;
  strcpy(a.sun_path, path);
  int s = socket(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0);
  if (s >= 0 && connect(s, (struct sockaddr *)&a, sizeof a) < 0) {
    close(s);
    return -1;
  }
  return s;
}

/* Reads the pipe to its EOF (bounded: a command that never ends fails the probe by timeout). */
static int drain_to_eof(int fd) {
  char buf[4096];
  for (;;) {
    struct pollfd p = {fd, POLLIN, 0};
    if (poll(&p, 1, 60000) <= 0)
      return -1;
    ssize_t r = read(fd, buf, sizeof buf);
    if (r == 0)
      return 0;
    if (r < 0 && errno != EINTR)
      return -1;
  }
}

/* Reads the rest of a reply, waiting (bounded) for it. */
static int finish_reply(int s, unsigned char *reply, size_t got) {
  while (got < WALLS_REPLY_LEN) {
    struct pollfd p = {s, POLLIN, 0};
    if (poll(&p, 1, 60000) <= 0)
      return -1;
    ssize_t r = recv(s, reply + got, WALLS_REPLY_LEN - got, 0);
    if (r <= 0)
      return -1;
    got += (size_t)r;
  }
  return 0;
}

int main(int argc, char **argv) {
  if (argc < 4)
    return 2;
  int n = atoi(argv[2]);
  int s = connect_to(argv[1]);
  if (s < 0) {
    perror("connect");
    return 1;
  }
  char *env[] = {"PATH=/usr/bin:/bin", NULL};
  size_t len = 0;
  char *body = walls_request_encode(argv + 3, env, "/workspace", &len);
  int null = open("/dev/null", O_RDWR | O_CLOEXEC);
  if (body == NULL || null < 0)
    return 1;
  int at_eof = 0, errors = 0;
  for (int i = 0; i < n; i++) {
    int out[2];
    if (pipe2(out, O_CLOEXEC) < 0)
      return 1;
    int fds[3] = {null, out[1], null};
    long sent = walls_request_send(s, (uint32_t)(i + 1), body, len, fds, 0);
    close(out[1]); /* the command's end is the spawner's now */
    if (sent != (long)len) {
      errors++;
      close(out[0]);
      break;
    }
    unsigned char reply[WALLS_REPLY_LEN];
    ssize_t got = -1;
    if (drain_to_eof(out[0]) == 0) {
      got = recv(s, reply, sizeof reply, MSG_DONTWAIT); /* there already? */
      if (got == (ssize_t)sizeof reply)
        at_eof++;
      if (got < 0)
        got = 0;
    }
    close(out[0]);
    uint32_t id = 0;
    int code = 0, signo = 0;
    if (got < 0 || finish_reply(s, reply, (size_t)got) < 0 ||
        walls_reply_decode(reply, sizeof reply, &id, &code, &signo) != 1 || id != (uint32_t)(i + 1) ||
        code != 0 || signo != 0)
      errors++;
  }
  printf("{\"n\":%d,\"reply_at_eof\":%d,\"errors\":%d}\n", n, at_eof, errors);
  free(body);
  return 0;
}
