/* `run`: the host side of one command — its stdio, argv and environment sent to the instance's
 * spawner, its signals forwarded, the command's status exited with. */
#include <errno.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <stdint.h>
#include <string.h>
#include <sys/socket.h>
#include <sys/un.h>
#include <unistd.h>
#include <fcntl.h>

#include "walls/request.h"
#include "walls/walls.h"

static int read_full(int fd, void *buf, size_t len) {
  size_t got = 0;
  while (got < len) {
    ssize_t r = read(fd, (char *)buf + got, len - got);
    if (r < 0 && errno == EINTR)
      continue;
    if (r <= 0)
      return -1;
    got += (size_t)r;
  }
  return 0;
}

static int write_full(int fd, const void *buf, size_t len) {
  size_t put = 0;
  while (put < len) {
    ssize_t w = send(fd, (const char *)buf + put, len - put, MSG_NOSIGNAL);
    if (w < 0 && errno == EINTR)
      continue;
    if (w <= 0)
      return -1;
    put += (size_t)w;
  }
  return 0;
}

static volatile sig_atomic_t run_socket = -1;

enum { RUN_ID = 1 }; /* the one command of this connection */

/* TERM, INT and HUP to the client (the supervisor's deadline, an abort) go on to the command's
 * group, one signal frame each. */
static void forward_signal(int sig) {
  int saved = errno;
  unsigned char frame[WALLS_FRAME_LEN];
  walls_frame_encode(frame, WALLS_FRAME_SIGNAL, RUN_ID, (uint32_t)sig);
  if (run_socket >= 0)
    (void)!send(run_socket, frame, sizeof frame, MSG_NOSIGNAL | MSG_DONTWAIT);
  errno = saved;
}

int run(const options *o) {
  extern char **environ;
  pid_t parent = getppid();
  if (o->socket == NULL || o->command == NULL || o->command[0] == NULL) {
    errno = 0;
    die("usage: switchboard-walls run SOCKET -- PROGRAM ARG...");
  }
  die_with_parent(parent); /* sandboxd killed: we die, the socket closes, the command dies */
  for (int i = 0; i < 3; i++) /* three real fds to pass, even if we were given fewer */
    if (fcntl(i, F_GETFD) < 0 && open("/dev/null", O_RDWR) != i)
      die("cannot open /dev/null");
  struct sockaddr_un a;
  memset(&a, 0, sizeof a);
  a.sun_family = AF_UNIX;
  if (strlen(o->socket) >= sizeof a.sun_path) {
    errno = 0;
    die("the spawner's socket path is too long: %s", o->socket);
  }
  strcpy(a.sun_path, o->socket);
  int s = socket(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0);
  if (s < 0 || connect(s, (struct sockaddr *)&a, sizeof a) < 0)
    die("the instance's spawner at %s does not answer (is the instance asleep?)", o->socket);
  size_t len = 0;
  char *body = walls_request_encode(o->command, environ, o->cwd, &len);
  if (body == NULL) {
    errno = 0;
    die("the command and its environment are over the spawner's limits (%d arguments, %d "
        "variables, %d bytes)", WALLS_MAX_ARGS, WALLS_MAX_ENV, WALLS_MAX_REQUEST);
  }
  int fds[3] = {0, 1, 2};
  long sent = walls_request_send(s, RUN_ID, body, len, fds, 0); /* blocking: the rest follows */
  int ok = sent >= 0 && write_full(s, body + sent, len - (size_t)sent) == 0;
  free(body);
  if (!ok)
    die("cannot send the command to the instance's spawner");
  run_socket = s;
  struct sigaction sa;
  memset(&sa, 0, sizeof sa);
  sa.sa_handler = forward_signal; /* no SA_RESTART: the read below retries itself */
  sigaction(SIGTERM, &sa, NULL);
  sigaction(SIGINT, &sa, NULL);
  sigaction(SIGHUP, &sa, NULL);
  unsigned char reply[WALLS_REPLY_LEN];
  uint32_t id = 0;
  int code = 0, signo = 0; /* set by the decode; clang cannot see that the kill below never returns */
  if (read_full(s, reply, sizeof reply) < 0 ||
      walls_reply_decode(reply, sizeof reply, &id, &code, &signo) != 1 || id != RUN_ID) {
    fputs("walls: the instance ended while the command ran\n", stderr);
    signal(SIGKILL, SIG_DFL);
    kill(getpid(), SIGKILL);
  }
  return mirror_status(signo != 0 ? signo : code << 8);
}
