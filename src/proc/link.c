/* The engine's links to sandbox instances' spawners (link.h): one unix connection per instance,
 * many commands on it. Written for the case that matters — a command's frame goes out in one
 * sendmsg and its reply comes back in one recv, with nothing allocated — and correct for the
 * rest: what the socket does not take waits in a queue (with copies of its descriptors) and
 * goes in order when the socket has room; a spawner found gone is a fresh link for the next
 * command, and the end of every command that was on the old one. */
#include "link.h"
#include "../engine/engine.h"
#include "walls/request.h"

#include <errno.h>
#include <fcntl.h>
#include <signal.h>
#include <stdbool.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <sys/un.h>
#include <unistd.h>

/* Bytes the socket did not take at once, in order; a command's descriptors go with its first
 * byte. */
typedef struct out_frame {
  struct out_frame *next;
  int fds[3]; /* copies, closed once sent; -1: none (a signal, or already sent) */
  size_t len, off;
  char bytes[];
} out_frame;

typedef struct sb_link {
  uv_poll_t poll;
  int fd;
  int events;    /* what the poll watches now */
  bool retired;  /* its spawner was found gone on a send: no new command; the read side ends it */
  bool dead;     /* ended: off the list, its handle closing */
  bool reading;  /* in read_all: a member told may land here again (its task, resumed) */
  uint32_t next_id;
  sb_link_member *members;
  out_frame *head, *tail;
  unsigned char in[WALLS_REPLY_LEN]; /* a reply's bytes so far */
  size_t in_len;
  struct sb_link *next, *prev; /* every live link (both ways: a link leaves in O(1), not by a
                                * walk of the fleet's links — 2,000 instances ending together
                                * made that walk 5 % of the loop's CPU, issue 43) */
  struct sb_link *same_hash; /* the next live link in its bucket of by_path */
  uint32_t hash;             /* of path */
  char path[];
} sb_link;

static sb_link *links;

/* Every live link by its path's hash: a command finds its instance's link in O(1), not by a
 * strcmp of every instance's path (issue 43: no per-command work that grows with the fleet —
 * 500 instances made it 5 % of the loop's CPU in threads500). */
enum { LINK_BUCKETS = 1024 };
static sb_link *by_path[LINK_BUCKETS];

static uint32_t path_hash(const char *path) {
  uint32_t h = 2166136261u; /* FNV-1a */
  for (const unsigned char *c = (const unsigned char *)path; *c; c++)
    h = (h ^ *c) * 16777619u;
  return h;
}

static void link_closed(uv_handle_t *h) {
  sb_link *l = h->data;
  close(l->fd);
  free(l);
}

static void frame_free(out_frame *f) {
  for (int i = 0; i < 3; i++)
    if (f->fds[i] >= 0)
      close(f->fds[i]);
  free(f);
}

static void member_remove(sb_link *l, sb_link_member *m) {
  if (m->prev)
    m->prev->next = m->next;
  else
    l->members = m->next;
  if (m->next)
    m->next->prev = m->prev;
  m->prev = m->next = NULL;
  m->link = NULL;
}

/* The link is over: off the list, its queue dropped, its handle closed (the fd with it), and
 * every command still on it told it is lost. */
static void link_fail(sb_link *l) {
  if (l->dead)
    return;
  l->dead = true;
  if (l->prev)
    l->prev->next = l->next;
  else
    links = l->next;
  if (l->next)
    l->next->prev = l->prev;
  l->next = l->prev = NULL;
  for (sb_link **at = &by_path[l->hash % LINK_BUCKETS]; *at != NULL; at = &(*at)->same_hash)
    if (*at == l) {
      *at = l->same_hash;
      break;
    }
  while (l->head != NULL) {
    out_frame *f = l->head;
    l->head = f->next;
    frame_free(f);
  }
  l->tail = NULL;
  uv_poll_stop(&l->poll);
  uv_close((uv_handle_t *)&l->poll, link_closed);
  while (l->members != NULL) { /* one at a time: a member's end may start other commands */
    sb_link_member *m = l->members;
    member_remove(l, m);
    m->ended(m, 0, 0, 0);
  }
}

static void on_poll(uv_poll_t *h, int status, int events);

static void watch(sb_link *l) {
  int want = UV_READABLE | (l->head != NULL ? UV_WRITABLE : 0);
  if (!l->dead && want != l->events) {
    l->events = want;
    uv_poll_start(&l->poll, want, on_poll);
  }
}

/* One sendmsg of `len` bytes, with `fds` (three, or NULL) as SCM_RIGHTS; never waits. */
static ssize_t send_part(int fd, const char *bytes, size_t len, const int *fds) {
  union {
    char buf[CMSG_SPACE(3 * sizeof(int))];
    struct cmsghdr align;
  } control;
  struct iovec iov = {(void *)bytes, len};
  struct msghdr msg;
  memset(&msg, 0, sizeof msg);
  msg.msg_iov = &iov;
  msg.msg_iovlen = 1;
  if (fds != NULL) {
    memset(&control, 0, sizeof control);
    msg.msg_control = control.buf;
    msg.msg_controllen = sizeof control.buf;
    struct cmsghdr *c = CMSG_FIRSTHDR(&msg);
    c->cmsg_level = SOL_SOCKET;
    c->cmsg_type = SCM_RIGHTS;
    c->cmsg_len = CMSG_LEN(3 * sizeof(int));
    memcpy(CMSG_DATA(c), fds, 3 * sizeof(int));
  }
  ssize_t r;
  do
    r = sendmsg(fd, &msg, MSG_NOSIGNAL | MSG_DONTWAIT);
  while (r < 0 && errno == EINTR);
  return r;
}

/* Sends what is queued, in order, as far as the socket takes it. Returns 0, or an errno value
 * when the socket is broken (the caller decides when to end the link). */
static int flush(sb_link *l) {
  while (l->head != NULL) {
    out_frame *f = l->head;
    ssize_t r = send_part(l->fd, f->bytes + f->off, f->len - f->off, f->fds[0] >= 0 ? f->fds : NULL);
    if (r < 0)
      return errno == EAGAIN || errno == EWOULDBLOCK ? 0 : errno;
    for (int i = 0; i < 3; i++) { /* they went with the first byte */
      if (f->fds[i] >= 0)
        close(f->fds[i]);
      f->fds[i] = -1;
    }
    f->off += (size_t)r;
    if (f->off < f->len)
      return 0;
    l->head = f->next;
    if (l->head == NULL)
      l->tail = NULL;
    free(f);
  }
  return 0;
}

/* Queues `len` bytes (copied) and copies of `fds` (three, or NULL) behind what waits. */
static int enqueue(sb_link *l, const void *a, size_t a_len, const void *b, size_t b_len, const int *fds) {
  out_frame *f = malloc(sizeof *f + a_len + b_len);
  if (f == NULL)
    return ENOMEM;
  f->next = NULL;
  f->len = a_len + b_len;
  f->off = 0;
  memcpy(f->bytes, a, a_len);
  if (b_len > 0)
    memcpy(f->bytes + a_len, b, b_len);
  for (int i = 0; i < 3; i++)
    f->fds[i] = -1;
  for (int i = 0; fds != NULL && i < 3; i++) {
    f->fds[i] = fcntl(fds[i], F_DUPFD_CLOEXEC, 3);
    if (f->fds[i] < 0) {
      int err = errno;
      frame_free(f);
      return err;
    }
  }
  if (l->tail)
    l->tail->next = f;
  else
    l->head = f;
  l->tail = f;
  return 0;
}

/* The bytes of one reply: the member it names is told, off the link first. */
static void dispatch(sb_link *l) {
  uint32_t id = 0;
  int code, signo;
  int rc = walls_reply_decode(l->in, sizeof l->in, &id, &code, &signo);
  l->in_len = 0;
  for (sb_link_member *m = l->members; m != NULL; m = m->next)
    if (m->id == id) {
      member_remove(l, m);
      m->ended(m, rc, code, signo);
      return;
    }
  /* no such member: one that left (its SIGKILL's reply), or bytes from nowhere — dropped */
}

/* Reads every reply there is. A member told may start commands on this link meanwhile. */
static void read_all(sb_link *l) {
  unsigned char buf[64 * WALLS_REPLY_LEN];
  if (l->reading) /* the outer read goes on with what is there */
    return;
  l->reading = true;
  while (!l->dead) {
    ssize_t n = recv(l->fd, buf, sizeof buf, MSG_DONTWAIT);
    if (n < 0 && errno == EINTR)
      continue;
    if (n < 0 && (errno == EAGAIN || errno == EWOULDBLOCK))
      break;
    if (n <= 0) { /* the spawner's end closed: the instance is gone */
      link_fail(l);
      break;
    }
    for (ssize_t i = 0; i < n && !l->dead; i++) {
      l->in[l->in_len++] = buf[i];
      if (l->in_len == sizeof l->in)
        dispatch(l);
    }
    /* a short read took all there was: a recv more would only say EAGAIN (one per reply);
     * bytes that come later wake the poll again (libuv's poll is level-triggered) */
    if ((size_t)n < sizeof buf)
      break;
  }
  l->reading = false;
}

static void on_poll(uv_poll_t *h, int status, int events) {
  sb_link *l = h->data;
  if (status < 0) {
    link_fail(l);
    return;
  }
  if ((events & UV_WRITABLE) && flush(l) != 0) {
    link_fail(l);
    return;
  }
  if (events & (UV_READABLE | UV_DISCONNECT))
    read_all(l);
  watch(l);
}

static int link_open(const char *path, sb_link **out) {
  struct sockaddr_un addr;
  memset(&addr, 0, sizeof addr);
  addr.sun_family = AF_UNIX;
  size_t n = strlen(path);
  if (n >= sizeof addr.sun_path)
    return ENAMETOOLONG;
  memcpy(addr.sun_path, path, n + 1);
  int fd = socket(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC | SOCK_NONBLOCK, 0);
  if (fd < 0)
    return errno;
  if (connect(fd, (struct sockaddr *)&addr, sizeof addr) < 0) {
    int err = errno; /* EAGAIN: its backlog is full; ECONNREFUSED, ENOENT: no spawner */
    close(fd);
    return err;
  }
  sb_link *l = calloc(1, sizeof *l + n + 1);
  if (l == NULL) {
    close(fd);
    return ENOMEM;
  }
  memcpy(l->path, path, n + 1);
  l->fd = fd;
  l->next_id = 1;
  if (uv_poll_init(sb_loop(), &l->poll, fd) != 0) {
    close(fd);
    free(l);
    return EIO;
  }
  l->poll.data = l;
  l->next = links;
  l->prev = NULL;
  if (links)
    links->prev = l;
  links = l;
  l->hash = path_hash(path);
  l->same_hash = by_path[l->hash % LINK_BUCKETS];
  by_path[l->hash % LINK_BUCKETS] = l;
  watch(l);
  *out = l;
  return 0;
}

static bool gone(int err) { return err == EPIPE || err == ECONNRESET || err == ENOTCONN; }

int sb_link_command(const char *path, const char *body, size_t len, const int fds[3],
                    sb_link_member *m) {
  for (int attempt = 0; attempt < 2; attempt++) {
    uint32_t hash = path_hash(path);
    sb_link *l = by_path[hash % LINK_BUCKETS];
    while (l != NULL && (l->retired || l->hash != hash || strcmp(l->path, path) != 0))
      l = l->same_hash;
    if (l == NULL) {
      int rc = link_open(path, &l);
      if (rc != 0)
        return rc;
    }
    uint32_t id = l->next_id++;
    if (l->next_id == 0)
      l->next_id = 1;
    int rc = 0;
    bool half_sent = false; /* a part of this command went: the rest cannot be dropped */
    if (l->head == NULL) { /* nothing waits: straight out, most often whole */
      long sent = walls_request_send(l->fd, id, body, len, fds, 1);
      if (sent < 0 && gone(errno)) {
        /* the spawner's end is closed (the instance stopped): its read side ends the commands
         * still on it, from the loop; this command gets a fresh link */
        l->retired = true;
        continue;
      }
      if (sent < 0 && errno != EAGAIN && errno != EWOULDBLOCK)
        return errno;
      if (sent < 0) {
        unsigned char header[WALLS_FRAME_LEN];
        walls_frame_encode(header, WALLS_FRAME_COMMAND, id, (uint32_t)len);
        rc = enqueue(l, header, sizeof header, body, len, fds);
      } else if ((size_t)sent < len) {
        half_sent = true;
        rc = enqueue(l, body + sent, len - (size_t)sent, NULL, 0, NULL);
      }
    } else {
      unsigned char header[WALLS_FRAME_LEN];
      walls_frame_encode(header, WALLS_FRAME_COMMAND, id, (uint32_t)len);
      rc = enqueue(l, header, sizeof header, body, len, fds);
    }
    if (rc != 0 && half_sent) {
      /* a command half sent cannot be taken back: the link is ended with the others on it */
      l->retired = true;
      shutdown(l->fd, SHUT_WR);
    }
    if (rc != 0)
      return rc; /* (nothing of it sent: the link and its commands go on) */
    m->link = l;
    m->id = id;
    m->prev = NULL;
    m->next = l->members;
    if (l->members)
      l->members->prev = m;
    l->members = m;
    watch(l);
    return 0;
  }
  return ECONNREFUSED;
}

void sb_link_signal(sb_link_member *m, int signo) {
  sb_link *l = m->link;
  if (l == NULL || l->dead)
    return;
  unsigned char frame[WALLS_FRAME_LEN];
  walls_frame_encode(frame, WALLS_FRAME_SIGNAL, m->id, (uint32_t)signo);
  if (l->head == NULL) {
    ssize_t r = send_part(l->fd, (const char *)frame, sizeof frame, NULL);
    if (r == (ssize_t)sizeof frame || (r < 0 && gone(errno)))
      return; /* sent; or the spawner is gone, which the read side learns */
    if (r > 0) { /* a part went: the rest must follow before anything else */
      (void)enqueue(l, frame + r, sizeof frame - (size_t)r, NULL, 0, NULL);
      watch(l);
      return;
    }
  }
  if (enqueue(l, frame, sizeof frame, NULL, 0, NULL) == 0)
    watch(l);
}

void sb_link_read_now(sb_link_member *m) {
  if (m->link != NULL)
    read_all(m->link);
}

void sb_link_leave(sb_link_member *m) {
  sb_link *l = m->link;
  if (l == NULL)
    return;
  sb_link_signal(m, SIGKILL);
  member_remove(l, m);
}

void sb_link_close_all(void) {
  while (links != NULL)
    link_fail(links);
}
