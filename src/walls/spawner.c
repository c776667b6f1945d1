/* The instance's spawner (`hold --socket`): one poll loop inside the instance's namespaces and
 * cgroups that takes commands over its unix socket (request.h: many on one connection),
 * starts each in a process group of its own, forwards its signals, and answers its wait status. */
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
 * connection, and no connection per command — a client (the engine keeps one per instance)
 * sends any number of commands on one connection, as frames (request.h): a command (its body,
 * with its stdin, stdout and stderr as SCM_RIGHTS on the frame's first byte), or a signal for
 * one of its commands' groups. Back goes each command's id and wait status when it ends. The
 * connection closing means SIGKILL to the groups of every command it started, at once (the
 * client — the engine, or `run` — is gone). */
enum {
  MAX_CONNS = 256,    /* clients at once: sandboxd's one, and `run`s */
  MAX_COMMANDS = 256, /* commands at once in one instance; pids_max bounds them anyway */
};

typedef struct {
  bool used;
  int fd;                              /* the connection (non-blocking) */
  unsigned char hdr[WALLS_FRAME_LEN];  /* the current frame's header, bytes so far */
  size_t hdr_got;
  walls_frame frame;                   /* decoded once the header is whole */
  int fds[3];                          /* a command's stdin, stdout, stderr; -1: none (yet) */
  char *body;                          /* owned; a command's body, bytes so far */
  size_t got;
  bool replies_waiting;                /* an ended command's reply found no room: POLLOUT */
} conn;

typedef struct {
  bool used;
  int conn;     /* its client's slot; -1 once that client has gone (its reply goes nowhere) */
  uint32_t id;  /* the client's number for it */
  pid_t pid;    /* the command, also its process group */
  bool ended;   /* reaped; its reply waits for room on the connection */
  int status;
  int output[2]; /* our copies of its stdout and stderr, held until it is reaped; -1: none */
} command;

/* static: the spawner has no other long-lived heap */
static conn conns[MAX_CONNS];
static command commands[MAX_COMMANDS];
/* One past the highest slot in use: the per-command scans (the poll set, a command's lookup,
 * the reaping) stop there instead of walking all 256 slots of each table — sandboxd keeps one
 * connection and most instances run one command at a time. */
static int conns_top, commands_top;

static void conn_taken(int slot) {
  if (slot >= conns_top)
    conns_top = slot + 1;
}

static void command_taken(command *k) {
  int slot = (int)(k - commands);
  if (slot >= commands_top)
    commands_top = slot + 1;
}

/* A command's slot is free again (the top comes down past the free slots above it). */
static void command_free(command *k) {
  k->used = false;
  while (commands_top > 0 && !commands[commands_top - 1].used)
    commands_top--;
}

/* The first free command slot, or NULL. */
static command *command_slot(void) {
  for (int i = 0; i < MAX_COMMANDS; i++)
    if (!commands[i].used)
      return &commands[i];
  return NULL;
}

static void frame_drop(conn *c) {
  for (int i = 0; i < 3; i++) {
    if (c->fds[i] >= 0)
      close(c->fds[i]);
    c->fds[i] = -1;
  }
  free(c->body);
  c->body = NULL;
  c->hdr_got = c->got = 0;
}

static void conn_init(conn *c) {
  memset(c, 0, sizeof *c);
  c->fd = c->fds[0] = c->fds[1] = c->fds[2] = -1;
}

/* The client is gone (or broke the protocol): every command it started is killed now, and its
 * replies go nowhere. */
static void conn_free(conn *c) {
  int slot = (int)(c - conns);
  for (int i = 0; i < commands_top; i++) {
    command *k = &commands[i];
    if (!k->used || k->conn != slot)
      continue;
    if (k->ended) {
      command_free(k);
    } else {
      kill(-k->pid, SIGKILL);
      k->conn = -1; /* the slot stays until the command is reaped */
    }
  }
  frame_drop(c);
  if (c->fd >= 0)
    close(c->fd);
  conn_init(c);
  while (conns_top > 0 && !conns[conns_top - 1].used)
    conns_top--;
}

/* Sends an ended command's reply, or leaves it waiting for room (POLLOUT on its connection).
 * Returns false when the connection is broken (the caller frees it). */
static bool reply_send(command *k) {
  conn *c = &conns[k->conn];
  unsigned char reply[WALLS_REPLY_LEN];
  walls_reply_encode(reply, k->id, k->status);
  ssize_t w;
  do
    w = send(c->fd, reply, sizeof reply, MSG_NOSIGNAL | MSG_DONTWAIT);
  while (w < 0 && errno == EINTR);
  if (w < 0 && (errno == EAGAIN || errno == EWOULDBLOCK)) {
    c->replies_waiting = true;
    return true;
  }
  command_free(k);
  return w == (ssize_t)sizeof reply; /* a unix stream takes a small send whole, or nothing */
}

/* Lets go of our copies of an ended command's stdout and stderr: the client sees their EOF now
 * (unless something the command left outside its group still holds them). */
static void command_release_output(command *k) {
  for (int i = 0; i < 2; i++) {
    if (k->output[i] >= 0)
      close(k->output[i]);
    k->output[i] = -1;
  }
}

/* A command has ended (reaped): its reply goes to its client, if it is still there, and only
 * then does its output end. The order is the point: holding the copies until the reply is on
 * the socket makes the client's loop see the status and the EOFs in one wakeup, where the
 * command's exit alone (its pipes closing as it dies) woke it once for the EOFs and again for
 * the status this process sends a few context switches later (issue 43: CPU per request). */
static void command_ended(command *k, int status) {
  k->ended = true;
  k->status = status;
  if (k->conn < 0) {
    command_release_output(k);
    command_free(k);
    return;
  }
  conn *c = &conns[k->conn];
  if (!c->replies_waiting && !reply_send(k)) /* else behind those already waiting */
    conn_free(c);
  command_release_output(k);
}

/* Room again on a connection: the replies that waited go. */
static void conn_writable(conn *c) {
  int slot = (int)(c - conns);
  c->replies_waiting = false;
  for (int i = 0; i < commands_top && !c->replies_waiting; i++) {
    command *k = &commands[i];
    if (k->used && k->ended && k->conn == slot && !reply_send(k)) {
      conn_free(c);
      return;
    }
  }
}

static command *command_of(int slot, uint32_t id) {
  for (int i = 0; i < commands_top; i++)
    if (commands[i].used && commands[i].conn == slot && commands[i].id == id)
      return &commands[i];
  return NULL;
}

/* A command that cannot run: its reason on its stderr, its reply status 70, as if it had
 * run and failed. */
static void command_refuse(conn *c, const char *why) {
  if (c->fds[2] >= 0)
    dprintf(c->fds[2], "walls: %s\n", why);
  command *k = command_slot();
  if (k == NULL) { /* not even a slot to answer from: the client learns it as a lost command */
    conn_free(c);
    return;
  }
  *k = (command){true, (int)(c - conns), c->frame.id, 0, false, 0, {-1, -1}};
  command_taken(k);
  frame_drop(c);
  command_ended(k, EXIT_WALLS << 8);
}

/* Reads what there is of the current frame's header, never past it (a recvmsg that reached
 * into the next frame could take that frame's descriptors). Returns 1 when it is complete, 0
 * to wait for more, -1 when the connection is done for (closed, or descriptors that do not
 * belong: exactly three, with a command frame's first byte, and none otherwise). */
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
  bool stray = got > 0 && !(first && got == 3 && !(msg.msg_flags & MSG_CTRUNC));
  if (got > 0 && !stray) {
    memcpy(c->fds, fds, sizeof c->fds);
    got = 0;
  }
  for (int i = 0; i < got; i++)
    close(fds[i]);
  if (stray)
    return -1;
  if (c->hdr_got < sizeof c->hdr)
    return 0;
  if (walls_frame_decode(c->hdr, &c->frame) < 0)
    return -1;
  bool has_fds = c->fds[0] >= 0;
  if (has_fds != (c->frame.kind == WALLS_FRAME_COMMAND))
    return -1; /* a command comes with its three descriptors, a signal with none */
  return 1;
}

/* Reads what there is of the body. Returns 1 when complete, 0 to wait, -1 on a closed socket. */
static int receive_body(conn *c) {
  while (c->got < c->frame.n) {
    ssize_t r = read(c->fd, c->body + c->got, c->frame.n - c->got);
    if (r < 0 && (errno == EAGAIN || errno == EINTR))
      return 0;
    if (r <= 0)
      return -1;
    c->got += (size_t)r;
  }
  return 1;
}

/* The rlimits every command gets, clamped once at the spawner's start to its own hard limits
 * (set_limit's rule: never raised), so a command's child sets them with one call each. */
static struct rlimit command_nofile, command_fsize;
static bool command_has_nofile, command_has_fsize;

static void command_limits(const options *o) {
  command_has_nofile = limit_for(RLIMIT_NOFILE, o->nofile, &command_nofile);
  command_has_fsize = limit_for(RLIMIT_FSIZE, o->fsize, &command_fsize);
}

/* In the vforked child (it shares the spawner's memory until exec: system calls only, _exit
 * on every failure): the received fds become 0-2, then the command runs in a process group of
 * its own with the rlimits. No capabilities and no_new_privs it has from the spawner, which
 * gave up the first and set the second for itself at its start (serve). */
static void exec_command(const walls_request *req, const int fds[3]) __attribute__((noreturn));
static void exec_command(const walls_request *req, const int fds[3]) {
  extern char **environ;
  sigset_t none;
  sigemptyset(&none);
  sigprocmask(SIG_SETMASK, &none, NULL);
  /* into place (dup2 clears close-on-exec on the copies; everything else of the spawner's has
   * it) — first out of the way of 0-2 when a received fd is one of them (the spawner's own 0-2
   * are open, so they are received above them: the detour is for the case that is not so) */
  int from[3] = {fds[0], fds[1], fds[2]};
  if (from[0] < 3 || from[1] < 3 || from[2] < 3)
    for (int i = 0; i < 3; i++)
      if ((from[i] = fcntl(fds[i], F_DUPFD_CLOEXEC, 10)) < 0)
        _exit(EXIT_WALLS);
  for (int i = 0; i < 3; i++)
    if (dup2(from[i], i) < 0)
      _exit(EXIT_WALLS);
  if (setpgid(0, 0) < 0)
    die("setpgid");
  if (prctl(PR_SET_PDEATHSIG, SIGKILL) < 0)
    die("prctl(PR_SET_PDEATHSIG)");
  if (command_has_nofile && setrlimit(RLIMIT_NOFILE, &command_nofile) < 0)
    die("setrlimit nofile %llu", (unsigned long long)command_nofile.rlim_max);
  if (command_has_fsize && setrlimit(RLIMIT_FSIZE, &command_fsize) < 0)
    die("setrlimit fsize %llu", (unsigned long long)command_fsize.rlim_max);
  if (chdir(req->cwd) < 0)
    die("chdir %s", req->cwd);
  environ = (char **)req->envp; /* execvp searches the command's own PATH */
  execvp(req->argv[0], req->argv);
  fprintf(stderr, "walls: cannot run %s: %s\n", req->argv[0], strerror(errno));
  _exit(errno == ENOENT ? 127 : 126);
}


/* The command's body is complete: parse it and vfork the command (a child of the spawner, so
 * born inside the PID namespace and the instance's cgroups). */
static void start_command(conn *c) {
  static walls_request req; /* large (pointer arrays); used only between parse and vfork */
  const char *why = "";
  if (command_of((int)(c - conns), c->frame.id) != NULL) {
    command_refuse(c, "a request under the number of a command still running");
    return;
  }
  if (walls_request_parse(c->body, c->frame.n, &req, &why) < 0) {
    char line[160];
    snprintf(line, sizeof line, "a malformed request: %s", why);
    command_refuse(c, line);
    return;
  }
  command *k = command_slot();
  if (k == NULL) {
    command_refuse(c, "too many commands at once in this instance");
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
    exec_command(&req, c->fds);
  environ = own_environ;
  if (pid < 0) {
    command_refuse(c, "cannot fork into the instance (its process limit?)");
    return;
  }
  /* (No setpgid from here as well: vfork resumes us only once the child has exec'd or died,
   * so its own setpgid has always come first — ours failed with EACCES on every command.) */
  /* its stdout and stderr stay open here until it is reaped (command_ended says why); they are
   * close-on-exec, so no later command inherits them */
  *k = (command){true, (int)(c - conns), c->frame.id, pid, false, 0, {c->fds[1], c->fds[2]}};
  command_taken(k);
  c->fds[1] = c->fds[2] = -1;
  frame_drop(c);
}

/* A signal for one of the client's commands' groups (one it may forward). */
static void signal_command(conn *c) {
  command *k = command_of((int)(c - conns), c->frame.id);
  int sig = (int)c->frame.n;
  frame_drop(c);
  if (k == NULL || k->ended) /* ended meanwhile: its reply is on the way */
    return;
  if (sig == SIGTERM || sig == SIGINT || sig == SIGHUP || sig == SIGKILL || sig == SIGQUIT ||
      sig == SIGUSR1 || sig == SIGUSR2 || sig == SIGSTOP || sig == SIGCONT)
    kill(-k->pid, sig);
}

/* Progress on a readable connection: the whole frames there are, in order, up to the first
 * command started (the rest on the next turn of the poll). */
static void conn_readable(conn *c) {
  while (c->used) { /* a refusal with no slot to answer from frees the connection */
    if (c->hdr_got < sizeof c->hdr || c->body == NULL) {
      int h = c->hdr_got < sizeof c->hdr ? receive_header(c) : 1;
      if (h < 0) {
        conn_free(c);
        return;
      }
      if (h == 0)
        return;
      if (c->frame.kind == WALLS_FRAME_SIGNAL) {
        signal_command(c);
        continue;
      }
      c->body = malloc(c->frame.n ? c->frame.n : 1);
      if (c->body == NULL) {
        command_refuse(c, "out of memory for the request");
        continue;
      }
    }
    int b = receive_body(c);
    if (b < 0) {
      conn_free(c);
      return;
    }
    if (b == 0)
      return;
    start_command(c);
    /* back to poll rather than a read that finds nothing: sandboxd sends one command at a
     * time per instance mostly, and poll is level-triggered, so a frame already waiting wakes
     * it again at once (one system call fewer per command) */
    return;
  }
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
    for (int i = 0; i < commands_top; i++) {
      command *k = &commands[i];
      if (k->used && !k->ended && k->pid == done) {
        kill(-done, SIGKILL); /* what it left in its group dies with it */
        command_ended(k, status);
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
    conn_taken((int)(c - conns));
  }
}

/* The holder's loop; ends with bwrap (the instance), returning its status mirrored. */
int serve(const options *o, int listener, pid_t bwrap) {
  /* Outside the PID namespace nothing inside sees this process; its arguments (host paths,
   * uids, cgroups) are blanked anyway, as a second line. */
  for (int i = 1; arg_area != NULL && arg_area[i] != NULL; i++)
    memset(arg_area[i], 0, strlen(arg_area[i]));
  /* The capabilities setns gave us inside the instance's user namespace are needed no more
   * (what follows — accept, vfork, setpgid, kill of our own uid's groups — needs none): gone
   * for good, with no_new_privs, here once rather than in every command's child, which
   * inherits both (a capability dropped is not a credential change that clears the death
   * signal; it is set again all the same). */
  drop_capabilities();
  if (prctl(PR_SET_PDEATHSIG, SIGKILL) < 0)
    die("prctl(PR_SET_PDEATHSIG)");
  command_limits(o);
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
    for (int i = 0; i < conns_top; i++)
      if (conns[i].used) {
        which[n] = i;
        p[n++] = (struct pollfd){conns[i].fd, (short)(POLLIN | (conns[i].replies_waiting ? POLLOUT : 0)), 0};
      }
    if (poll(p, (nfds_t)n, -1) < 0) {
      if (errno == EINTR)
        continue;
      die("poll");
    }
    if (p[1].revents) {
      /* one read takes it: SIGCHLD is a standard signal, pending once however many children
       * ended (waitpid below reaps them all), so a second read only ever found nothing */
      struct signalfd_siginfo si;
      (void)!read(sfd, &si, sizeof si);
      if (reap_children(bwrap, &bwrap_status))
        return mirror_status(bwrap_status); /* the PID namespace took every command with it */
    }
    for (int k = 2; k < n; k++) {
      conn *c = &conns[which[k]];
      if (!c->used || c->fd != p[k].fd)
        continue; /* freed (and maybe reused) while this turn ran */
      if (p[k].revents & POLLOUT)
        conn_writable(c);
      if (c->used && c->fd == p[k].fd && (p[k].revents & ~POLLOUT))
        conn_readable(c);
    }
    if (p[0].revents & POLLIN)
      accept_all(listener);
  }
}
