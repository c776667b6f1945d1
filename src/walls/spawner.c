/* The instance's spawner (`hold --socket`): one poll loop inside the instance's namespaces and
 * cgroups that takes each command over its unix socket (request.h), starts it in a process
 * group of its own, forwards its signals, and answers its wait status. */
#include <errno.h>
#include <fcntl.h>
#include <poll.h>
#include <signal.h>
#include <stdbool.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/prctl.h>
#include <sys/resource.h>
#include <sys/signalfd.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/un.h>
#include <sys/wait.h>
#include <unistd.h>

#include "walls/request.h"
#include "walls/walls.h"

/* A unix stream socket listening at `path` (an old one there is replaced), mode 0600. */
int bind_spawner(const char *path) {
  struct sockaddr_un a;
  memset(&a, 0, sizeof a);
  a.sun_family = AF_UNIX;
  if (strlen(path) >= sizeof a.sun_path) {
    errno = 0;
    die("the spawner's socket path is too long (%zu bytes, at most %zu): %s", strlen(path),
        sizeof a.sun_path - 1, path);
  }
  strcpy(a.sun_path, path);
  int fd = socket(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0);
  if (fd < 0)
    die("socket");
  (void)unlink(path);
  if (bind(fd, (struct sockaddr *)&a, sizeof a) < 0 || chmod(path, 0600) < 0 || listen(fd, 128) < 0)
    die("cannot listen at %s", path);
  return fd;
}

/* The spawner serves every command of its instance itself, in one poll loop: no process per
 * connection. A connection carries one command: the header (u32 body length, with the
 * command's stdin, stdout and stderr as SCM_RIGHTS), the body (request.h), then single bytes,
 * each a signal for the command's group; back goes the command's wait status (4 bytes). The
 * socket closing before the command ends means SIGKILL to its group at once (the client — the
 * engine, or `run` — is gone). */
enum { MAX_CONNS = 256 }; /* commands at once in one instance; pids_max bounds them anyway */

typedef struct {
  bool used;
  int fd;               /* the connection (non-blocking); -1 once the client has gone */
  int fds[3];           /* the command's stdin, stdout, stderr as received; -1: none (yet) */
  unsigned char hdr[4]; /* the header's bytes so far */
  size_t hdr_got;
  uint32_t len;         /* the body's length, from the header */
  char *body;           /* owned; the body's bytes so far */
  size_t got;
  pid_t pid;            /* the command, also its process group; 0 until it starts */
} conn;

static conn conns[MAX_CONNS]; /* static: the spawner has no other long-lived heap */

static void conn_drop_request(conn *c) {
  for (int i = 0; i < 3; i++) {
    if (c->fds[i] >= 0)
      close(c->fds[i]);
    c->fds[i] = -1;
  }
  free(c->body);
  c->body = NULL;
}

static void conn_init(conn *c) {
  memset(c, 0, sizeof *c);
  c->fd = c->fds[0] = c->fds[1] = c->fds[2] = -1;
}

static void conn_free(conn *c) {
  conn_drop_request(c);
  if (c->fd >= 0)
    close(c->fd);
  conn_init(c);
}

/* Sends the 4-byte wait status; the client reads nothing else, so its receive buffer has
 * room (a lost status reads as "the instance ended" there, never as a wrong status). */
static void conn_reply(conn *c, int status) {
  if (c->fd >= 0)
    (void)!send(c->fd, &status, sizeof status, MSG_NOSIGNAL | MSG_DONTWAIT);
}

/* A request that cannot run: its reason on the command's stderr (when it came), status 70. */
static void conn_refuse(conn *c, const char *why) {
  if (c->fds[2] >= 0)
    dprintf(c->fds[2], "walls: %s\n", why);
  conn_reply(c, EXIT_WALLS << 8);
  conn_free(c);
}

/* Reads what there is of the header. Returns 1 when it is complete, 0 to wait for more, -1
 * when the connection is done for (closed, or not exactly three fds with the first byte). */
static int receive_header(conn *c) {
  union {
    char buf[CMSG_SPACE(4 * sizeof(int))];
    struct cmsghdr align;
  } control;
  struct iovec iov = {c->hdr + c->hdr_got, sizeof c->hdr - c->hdr_got};
  struct msghdr msg;
  memset(&msg, 0, sizeof msg);
  msg.msg_iov = &iov;
  msg.msg_iovlen = 1;
  msg.msg_control = control.buf;
  msg.msg_controllen = sizeof control.buf;
  ssize_t r = recvmsg(c->fd, &msg, MSG_CMSG_CLOEXEC | MSG_DONTWAIT);
  if (r < 0 && (errno == EAGAIN || errno == EINTR))
    return 0;
  if (r <= 0)
    return -1;
  int got = 0, fds[4] = {-1, -1, -1, -1};
  for (struct cmsghdr *m = CMSG_FIRSTHDR(&msg); m != NULL; m = CMSG_NXTHDR(&msg, m)) {
    if (m->cmsg_level != SOL_SOCKET || m->cmsg_type != SCM_RIGHTS)
      continue;
    size_t n = (m->cmsg_len - CMSG_LEN(0)) / sizeof(int);
    for (size_t i = 0; i < n; i++) {
      int fd;
      memcpy(&fd, CMSG_DATA(m) + i * sizeof(int), sizeof(int));
      if (got < 4)
        fds[got++] = fd;
      else
        close(fd);
    }
  }
  bool first = c->hdr_got == 0;
  c->hdr_got += (size_t)r;
  if (first && got == 3 && !(msg.msg_flags & MSG_CTRUNC)) {
    memcpy(c->fds, fds, sizeof c->fds);
    got = 0;
  }
  for (int i = 0; i < got; i++)
    close(fds[i]);
  if (c->fds[0] < 0)
    return -1; /* the fds come with the first byte, exactly three, or the request is void */
  if (c->hdr_got < sizeof c->hdr)
    return 0;
  memcpy(&c->len, c->hdr, sizeof c->len);
  return 1;
}

/* Reads what there is of the body. Returns 1 when complete, 0 to wait, -1 on a closed socket. */
static int receive_body(conn *c) {
  while (c->got < c->len) {
    ssize_t r = read(c->fd, c->body + c->got, c->len - c->got);
    if (r < 0 && (errno == EAGAIN || errno == EINTR))
      return 0;
    if (r <= 0)
      return -1;
    c->got += (size_t)r;
  }
  return 1;
}

/* In the vforked child (it shares the spawner's memory until exec: system calls only, _exit
 * on every failure): the received fds become 0-2, then the command runs in a process group of
 * its own with the rlimits, no capabilities and no_new_privs. */
static void exec_command(const options *o, const walls_request *req, const int fds[3])
    __attribute__((noreturn));
static void exec_command(const options *o, const walls_request *req, const int fds[3]) {
  extern char **environ;
  sigset_t none;
  sigemptyset(&none);
  sigprocmask(SIG_SETMASK, &none, NULL);
  /* out of the way of 0-2 first (a received fd may already be one of them), then into place
   * (dup2 clears close-on-exec on the copies; everything else of the spawner's has it) */
  int moved[3];
  for (int i = 0; i < 3; i++)
    if ((moved[i] = fcntl(fds[i], F_DUPFD_CLOEXEC, 10)) < 0)
      _exit(EXIT_WALLS);
  for (int i = 0; i < 3; i++)
    if (dup2(moved[i], i) < 0)
      _exit(EXIT_WALLS);
  if (setpgid(0, 0) < 0)
    die("setpgid");
  if (prctl(PR_SET_PDEATHSIG, SIGKILL) < 0)
    die("prctl(PR_SET_PDEATHSIG)");
  set_limit(RLIMIT_NOFILE, o->nofile, "nofile");
  set_limit(RLIMIT_FSIZE, o->fsize, "fsize");
  if (chdir(req->cwd) < 0)
    die("chdir %s", req->cwd);
  drop_capabilities();
  environ = (char **)req->envp; /* execvp searches the command's own PATH */
  execvp(req->argv[0], req->argv);
  fprintf(stderr, "walls: cannot run %s: %s\n", req->argv[0], strerror(errno));
  _exit(errno == ENOENT ? 127 : 126);
}

/* The request is complete: parse it and fork the command (a child of the spawner, so born
 * inside the PID namespace and the instance's cgroups). */
static void start_command(const options *o, conn *c) {
  static walls_request req; /* large (pointer arrays); used only between parse and fork */
  const char *why = "";
  if (walls_request_parse(c->body, c->len, &req, &why) < 0) {
    char line[160];
    snprintf(line, sizeof line, "a malformed request: %s", why);
    conn_refuse(c, line);
    return;
  }
  /* vfork, not fork (issue 28): the child borrows the spawner's memory until its exec instead
   * of copying its page tables, and the spawner waits that long. Safe here because the spawner
   * installs no signal handlers (SIGCHLD is blocked and read from a signalfd, the rest keep
   * their dispositions), the child only makes system calls, dies with _exit, and the one global
   * it writes, environ, is put back below once the child has exec'd or died. */
  extern char **environ;
  char **own_environ = environ;
  pid_t pid = vfork();
  if (pid == 0)
    exec_command(o, &req, c->fds);
  environ = own_environ;
  if (pid < 0) {
    conn_refuse(c, "cannot fork into the instance (its process limit?)");
    return;
  }
  (void)setpgid(pid, pid); /* also here: a signal forwarded at once must find the group */
  c->pid = pid;
  conn_drop_request(c);
}

/* Progress on a readable connection. */
static void conn_readable(const options *o, conn *c) {
  if (c->pid > 0) { /* running: signal bytes, or the client's end */
    unsigned char sig[16];
    ssize_t n = read(c->fd, sig, sizeof sig);
    if (n < 0 && (errno == EAGAIN || errno == EINTR))
      return;
    if (n <= 0) {
      kill(-c->pid, SIGKILL); /* the client was killed: so is the command */
      close(c->fd);
      c->fd = -1; /* the slot stays until the command is reaped */
      return;
    }
    for (ssize_t i = 0; i < n; i++)
      if (sig[i] == SIGTERM || sig[i] == SIGINT || sig[i] == SIGHUP || sig[i] == SIGKILL ||
          sig[i] == SIGQUIT || sig[i] == SIGUSR1 || sig[i] == SIGUSR2 || sig[i] == SIGSTOP ||
          sig[i] == SIGCONT)
        kill(-c->pid, sig[i]);
    return;
  }
  if (c->hdr_got < sizeof c->hdr) {
    int h = receive_header(c);
    if (h < 0) {
      conn_free(c);
      return;
    }
    if (h == 0)
      return;
    if (c->len > WALLS_MAX_REQUEST) {
      conn_refuse(c, "a request over the size limit");
      return;
    }
    c->body = malloc(c->len ? c->len : 1);
    if (c->body == NULL) {
      conn_refuse(c, "out of memory for the request");
      return;
    }
  }
  int b = receive_body(c);
  if (b < 0)
    conn_free(c);
  else if (b > 0)
    start_command(o, c);
}

/* Reaps every child that has ended: bwrap (the instance is over: returns true with its wait
 * status in *bwrap_status) or a command (its group is killed, its status sent). */
static bool reap_children(pid_t bwrap, int *bwrap_status) {
  int status;
  pid_t done;
  bool over = false;
  while ((done = waitpid(-1, &status, WNOHANG)) > 0) {
    if (done == bwrap) {
      *bwrap_status = status;
      over = true;
      continue;
    }
    for (int i = 0; i < MAX_CONNS; i++) {
      conn *c = &conns[i];
      if (c->used && c->pid == done) {
        kill(-done, SIGKILL); /* what it left in its group dies with it */
        conn_reply(c, status);
        conn_free(c);
        break;
      }
    }
  }
  return over;
}

static void accept_all(int listener) {
  for (;;) {
    int fd = accept4(listener, NULL, NULL, SOCK_CLOEXEC | SOCK_NONBLOCK);
    if (fd < 0)
      return;
    conn *c = NULL;
    for (int i = 0; i < MAX_CONNS && c == NULL; i++)
      if (!conns[i].used)
        c = &conns[i];
    if (c == NULL) {
      close(fd); /* the client sees the socket close without a status */
      continue;
    }
    c->used = true;
    c->fd = fd;
  }
}

/* The holder's loop; ends with bwrap (the instance), returning its status mirrored. */
int serve(const options *o, int listener, pid_t bwrap) {
  /* Outside the PID namespace nothing inside sees this process; its arguments (host paths,
   * uids, cgroups) are blanked anyway, as a second line. */
  for (int i = 1; arg_area != NULL && arg_area[i] != NULL; i++)
    memset(arg_area[i], 0, strlen(arg_area[i]));
  sigset_t chld;
  sigemptyset(&chld);
  sigaddset(&chld, SIGCHLD);
  if (sigprocmask(SIG_BLOCK, &chld, NULL) < 0)
    die("sigprocmask");
  int sfd = signalfd(-1, &chld, SFD_CLOEXEC | SFD_NONBLOCK);
  if (sfd < 0)
    die("signalfd");
  if (fcntl(listener, F_SETFL, O_NONBLOCK) < 0)
    die("fcntl");
  for (int i = 0; i < MAX_CONNS; i++)
    conn_init(&conns[i]);
  static struct pollfd p[MAX_CONNS + 2];
  static int which[MAX_CONNS + 2];
  int bwrap_status = 0;
  for (;;) {
    int n = 0;
    p[n++] = (struct pollfd){listener, POLLIN, 0};
    p[n++] = (struct pollfd){sfd, POLLIN, 0};
    for (int i = 0; i < MAX_CONNS; i++)
      if (conns[i].used && conns[i].fd >= 0) {
        which[n] = i;
        p[n++] = (struct pollfd){conns[i].fd, POLLIN, 0};
      }
    if (poll(p, (nfds_t)n, -1) < 0) {
      if (errno == EINTR)
        continue;
      die("poll");
    }
    if (p[1].revents) {
      struct signalfd_siginfo si;
      while (read(sfd, &si, sizeof si) > 0) {
      }
      if (reap_children(bwrap, &bwrap_status))
        return mirror_status(bwrap_status); /* the PID namespace took every command with it */
    }
    for (int k = 2; k < n; k++) {
      conn *c = &conns[which[k]];
      if (p[k].revents && c->used && c->fd == p[k].fd)
        conn_readable(o, c);
    }
    if (p[0].revents & POLLIN)
      accept_all(listener);
  }
}
