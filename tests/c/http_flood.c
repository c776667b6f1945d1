/* http_flood: many raw TCP connections at once, for the attack spec
 * (tests/e2e/sandboxd_attack_spec.lua). Loopback only: it connects to HOST (the spec passes
 * 127.0.0.1) and never anywhere else.
 *
 *   http_flood [--duration MS] [--from ADDR] HOST PORT MODE ARGS...
 *
 * Modes:
 *   body CONNS BYTES HEAD   CONNS connections each send HEAD (C escapes \r \n \\; "%L" is
 *                           replaced by BYTES) and then BYTES of body as fast as the server
 *                           takes them, until the duration ends. Prints
 *                           "answers STATUS=N …" (first status line seen per connection),
 *                           "sent N" (body bytes the server accepted from us).
 *   idle CONNS              keeps CONNS connections open and silent, re-opening each one the
 *                           server closes, until the duration ends. Prints "opened N",
 *                           "closed_by_server N".
 *   pipeline COUNT TEMPLATES MARKS
 *                           one connection: COUNT requests written back to back (request i
 *                           from TEMPLATES, '|'-separated, taken in turn; "%d" is i), reading
 *                           answers all the while; then reads until COUNT answers came or the
 *                           duration ends. Answer i must contain MARKS[i mod k] with "%d" = i
 *                           ("-": no check). Prints "answers N", "in_order N", "statuses …",
 *                           "ended answers|eof|duration".
 *
 *   slowread REQFILE OUTFILE RATE
 *                           one connection with a small receive buffer (64 KiB): sends the
 *                           bytes of REQFILE, then reads at most RATE bytes a second into
 *                           OUTFILE until the server closes or the duration ends — a steady
 *                           reader on a slow link, whose unused bandwidth is not saved up
 *                           (at most 100 ms of it). Prints "bytes N" and "eof 1|0".
 *
 * --from binds the local address (e.g. 127.0.0.2) so a spec can be two peers on loopback. The
 * run ends after --duration (default 3000) ms; the exit status is 0 unless setup failed. */
#ifndef _GNU_SOURCE
#define _GNU_SOURCE
#endif
#include <arpa/inet.h>
#include <errno.h>
#include <fcntl.h>
#include <netinet/in.h>
#include <poll.h>
#include <signal.h>
#include <stdbool.h>
#include <stdint.h>
#include <strings.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <time.h>
#include <unistd.h>

enum { MAX_CONNS = 4096, MAX_STATUS = 600 };

static struct sockaddr_in server_addr, from_addr;
static bool use_from;
static long long deadline_ms;

static long long now_ms(void) {
  struct timespec ts;
  clock_gettime(CLOCK_MONOTONIC, &ts);
  return (long long)ts.tv_sec * 1000 + ts.tv_nsec / 1000000;
}

static size_t unescape(const char *in, char *out) {
  size_t n = 0;
  for (const char *p = in; *p; p++) {
    if (*p == '\\' && p[1] != '\0') {
      p++;
      out[n++] = *p == 'r' ? '\r' : *p == 'n' ? '\n' : *p;
    } else {
      out[n++] = *p;
    }
  }
  out[n] = '\0';
  return n;
}

/* A non-blocking connection in progress; -1 when none could be made. */
static int open_conn(void) {
  int fd = socket(AF_INET, SOCK_STREAM | SOCK_NONBLOCK | SOCK_CLOEXEC, 0);
  if (fd < 0)
    return -1;
  if (use_from && bind(fd, (struct sockaddr *)&from_addr, sizeof from_addr) != 0) {
    close(fd);
    return -1;
  }
  if (connect(fd, (struct sockaddr *)&server_addr, sizeof server_addr) != 0 &&
      errno != EINPROGRESS) {
    close(fd);
    return -1;
  }
  return fd;
}

/* ---- body ---------------------------------------------------------------------------------- */

typedef struct {
  int fd;
  size_t head_sent, body_sent;
  int status; /* first status line seen, 0 before */
  char got[16];
  size_t got_len;
} body_conn;

static int mode_body(int conns, long long bytes, const char *head_template) {
  char head[8300], tmp[8192], len_text[32];
  snprintf(len_text, sizeof len_text, "%lld", bytes);
  if (strlen(head_template) >= sizeof tmp)
    return 2;
  unescape(head_template, tmp);
  char *at = strstr(tmp, "%L");
  if (at != NULL) {
    *at = '\0';
    snprintf(head, sizeof head, "%s%s%s", tmp, len_text, at + 2);
  } else {
    snprintf(head, sizeof head, "%s", tmp);
  }
  size_t head_len = strlen(head);
  static char chunk[65536];
  memset(chunk, 'x', sizeof chunk);
  body_conn *c = calloc((size_t)conns, sizeof *c);
  struct pollfd *pf = calloc((size_t)conns, sizeof *pf);
  for (int i = 0; i < conns; i++)
    c[i].fd = open_conn();
  long long sent = 0;
  while (now_ms() < deadline_ms) {
    int live = 0;
    for (int i = 0; i < conns; i++) {
      pf[i].fd = c[i].fd;
      pf[i].events = POLLIN;
      if (c[i].fd >= 0 && (c[i].head_sent < head_len || (long long)c[i].body_sent < bytes))
        pf[i].events |= POLLOUT;
      live += c[i].fd >= 0;
    }
    if (live == 0)
      break;
    int left = (int)(deadline_ms - now_ms());
    if (poll(pf, (nfds_t)conns, left > 50 ? 50 : left < 0 ? 0 : left) < 0)
      break;
    for (int i = 0; i < conns; i++) {
      body_conn *b = &c[i];
      if (b->fd < 0 || pf[i].revents == 0)
        continue;
      if (pf[i].revents & (POLLIN | POLLHUP | POLLERR)) {
        char buf[4096];
        ssize_t n = recv(b->fd, buf, sizeof buf, 0);
        if (n > 0 && b->got_len < sizeof b->got - 1) {
          size_t take = (size_t)n < sizeof b->got - 1 - b->got_len ? (size_t)n
                                                                    : sizeof b->got - 1 - b->got_len;
          memcpy(b->got + b->got_len, buf, take);
          b->got_len += take;
          b->got[b->got_len] = '\0';
          if (b->status == 0 && b->got_len >= 12 && strncmp(b->got, "HTTP/1.1 ", 9) == 0)
            b->status = atoi(b->got + 9);
        }
        if (n == 0 || (n < 0 && errno != EAGAIN)) {
          close(b->fd);
          b->fd = -1;
          continue;
        }
      }
      if (pf[i].revents & POLLOUT) {
        ssize_t n;
        if (b->head_sent < head_len) {
          n = send(b->fd, head + b->head_sent, head_len - b->head_sent, MSG_NOSIGNAL);
          if (n > 0)
            b->head_sent += (size_t)n;
        } else {
          long long want = bytes - (long long)b->body_sent;
          n = send(b->fd, chunk, want < (long long)sizeof chunk ? (size_t)want : sizeof chunk,
                   MSG_NOSIGNAL);
          if (n > 0) {
            b->body_sent += (size_t)n;
            sent += n;
          }
        }
        if (n < 0 && errno != EAGAIN) {
          close(b->fd);
          b->fd = -1;
        }
      }
    }
  }
  int counts[MAX_STATUS] = {0};
  int none = 0;
  for (int i = 0; i < conns; i++) {
    if (c[i].status > 0 && c[i].status < MAX_STATUS)
      counts[c[i].status]++;
    else
      none++;
    if (c[i].fd >= 0)
      close(c[i].fd);
  }
  printf("answers");
  for (int s = 0; s < MAX_STATUS; s++)
    if (counts[s] > 0)
      printf(" %d=%d", s, counts[s]);
  printf(" none=%d\nsent %lld\n", none, sent);
  free(c);
  free(pf);
  return 0;
}

/* ---- idle ---------------------------------------------------------------------------------- */

static int mode_idle(int conns) {
  int *fds = calloc((size_t)conns, sizeof *fds);
  struct pollfd *pf = calloc((size_t)conns, sizeof *pf);
  long long opened = 0, closed = 0;
  for (int i = 0; i < conns; i++) {
    fds[i] = open_conn();
    opened += fds[i] >= 0;
  }
  while (now_ms() < deadline_ms) {
    for (int i = 0; i < conns; i++) {
      pf[i].fd = fds[i];
      pf[i].events = POLLIN;
    }
    int left = (int)(deadline_ms - now_ms());
    if (poll(pf, (nfds_t)conns, left > 50 ? 50 : left < 0 ? 0 : left) < 0)
      break;
    for (int i = 0; i < conns; i++) {
      if (fds[i] >= 0 && pf[i].revents == 0)
        continue;
      if (fds[i] >= 0) {
        char buf[512];
        ssize_t n = recv(fds[i], buf, sizeof buf, 0);
        if (n > 0 || (n < 0 && errno == EAGAIN))
          continue; /* an answer (503) before the close: the close follows */
        close(fds[i]);
        closed++;
      }
      fds[i] = open_conn(); /* re-open at once, as the flood in issue 16 did */
      opened += fds[i] >= 0;
    }
  }
  for (int i = 0; i < conns; i++)
    if (fds[i] >= 0)
      close(fds[i]);
  printf("opened %lld\nclosed_by_server %lld\n", opened, closed);
  free(fds);
  free(pf);
  return 0;
}

/* ---- pipeline ------------------------------------------------------------------------------ */

static char *split_nth(const char *list, int n, int *count) {
  int k = 1;
  for (const char *p = list; *p; p++)
    k += *p == '|';
  *count = k;
  n %= k;
  const char *start = list;
  for (int i = 0; i < n; i++)
    start = strchr(start, '|') + 1;
  const char *end = strchr(start, '|');
  size_t len = end != NULL ? (size_t)(end - start) : strlen(start);
  char *out = malloc(len + 1);
  memcpy(out, start, len);
  out[len] = '\0';
  return out;
}

/* Parses complete answers from buf[*at, len): content-length framing, 1xx skipped. */
static void parse_answers(const char *buf, size_t len, size_t *at, int *answers, int *in_order,
                          int *counts, const char *marks) {
  for (;;) {
    const char *start = buf + *at;
    size_t avail = len - *at;
    const char *end = memmem(start, avail, "\r\n\r\n", 4);
    if (end == NULL)
      return;
    size_t head_len = (size_t)(end - start) + 4;
    long long body = 0;
    for (const char *p = start; p < end; p++)
      if ((*p == '\n') && strncasecmp(p + 1, "content-length:", 15) == 0)
        body = atoll(p + 16);
    if (avail < head_len + (size_t)body)
      return;
    int status = avail > 12 ? atoi(start + 9) : 0;
    *at += head_len + (size_t)body;
    if (status >= 100 && status < 200)
      continue;
    if (status > 0 && status < MAX_STATUS)
      counts[status]++;
    int k;
    char *mark = split_nth(marks, *answers, &k);
    char want[256];
    snprintf(want, sizeof want, mark, *answers);
    if (strcmp(mark, "-") == 0 || memmem(start + head_len, (size_t)body, want, strlen(want)))
      (*in_order)++;
    free(mark);
    (*answers)++;
  }
}

static int mode_pipeline(int count, const char *templates, const char *marks) {
  int fd = open_conn();
  if (fd < 0)
    return 2;
  struct pollfd p = {fd, POLLOUT, 0};
  poll(&p, 1, 2000);
  /* all requests, back to back */
  size_t out_cap = 1 << 20, out_len = 0;
  char *out = malloc(out_cap);
  for (int i = 0; i < count; i++) {
    int k;
    char *t = split_nth(templates, i, &k);
    char raw[4096], line[4096];
    if (strlen(t) >= sizeof raw) {
      free(t);
      return 2;
    }
    unescape(t, raw);
    int n = snprintf(line, sizeof line, raw, i);
    free(t);
    if (out_len + (size_t)n > out_cap) {
      out_cap *= 2;
      out = realloc(out, out_cap);
    }
    memcpy(out + out_len, line, (size_t)n);
    out_len += (size_t)n;
  }
  size_t in_cap = 1 << 20, in_len = 0, parsed = 0, written = 0;
  char *in = malloc(in_cap);
  int answers = 0, in_order = 0, counts[MAX_STATUS] = {0};
  bool eof = false;
  while (now_ms() < deadline_ms && answers < count && !eof) {
    p.events = POLLIN | (written < out_len ? POLLOUT : 0);
    int left = (int)(deadline_ms - now_ms());
    if (poll(&p, 1, left > 50 ? 50 : left < 0 ? 0 : left) < 0)
      break;
    if (p.revents & POLLOUT) {
      ssize_t n = send(fd, out + written, out_len - written, MSG_NOSIGNAL);
      if (n > 0)
        written += (size_t)n;
    }
    if (p.revents & (POLLIN | POLLHUP | POLLERR)) {
      if (in_cap - in_len < 65536) {
        in_cap *= 2;
        in = realloc(in, in_cap);
      }
      ssize_t n = recv(fd, in + in_len, in_cap - in_len, 0);
      if (n > 0)
        in_len += (size_t)n;
      else if (n == 0 || errno != EAGAIN)
        eof = true;
      parse_answers(in, in_len, &parsed, &answers, &in_order, counts, marks);
    }
  }
  printf("answers %d\nin_order %d\nwritten %zu of %zu\nstatuses", answers, in_order, written,
         out_len);
  for (int s = 0; s < MAX_STATUS; s++)
    if (counts[s] > 0)
      printf(" %d=%d", s, counts[s]);
  /* why the run ended: every answer, the server's close, or the duration */
  printf("\nended %s\n", answers >= count ? "answers" : eof ? "eof" : "duration");
  close(fd);
  free(out);
  free(in);
  return 0;
}

/* ---- slowread ------------------------------------------------------------------------------ */

static int mode_slowread(const char *req_path, const char *out_path, long long rate) {
  FILE *rf = fopen(req_path, "rb");
  FILE *of = fopen(out_path, "wb");
  if (rf == NULL || of == NULL)
    return 2;
  static char req[1 << 20];
  size_t req_len = fread(req, 1, sizeof req, rf);
  fclose(rf);
  int fd = socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
  int small = 64 * 1024;
  setsockopt(fd, SOL_SOCKET, SO_RCVBUF, &small, sizeof small); /* before connect: the window */
  if (connect(fd, (struct sockaddr *)&server_addr, sizeof server_addr) != 0)
    return 2;
  for (size_t at = 0; at < req_len;) {
    ssize_t n = send(fd, req + at, req_len - at, MSG_NOSIGNAL);
    if (n <= 0)
      return 2;
    at += (size_t)n;
  }
  static char buf[16384];
  /* A link's bandwidth is not saved up: while the server works and sends nothing, at most
   * 100 ms of credit accrues, so the reader never bursts through an answer that came late. */
  long long burst = rate / 10 > (long long)sizeof buf ? rate / 10 : (long long)sizeof buf;
  long long got = 0, credit = 0, last = now_ms();
  bool eof = false;
  while (now_ms() < deadline_ms) {
    long long now = now_ms();
    credit += (now - last) * rate / 1000;
    last = now;
    if (credit > burst)
      credit = burst;
    if (credit <= 0) {
      usleep(2000);
      continue;
    }
    struct pollfd p = {fd, POLLIN, 0};
    if (poll(&p, 1, 50) <= 0)
      continue;
    ssize_t n = recv(fd, buf, credit < (long long)sizeof buf ? (size_t)credit : sizeof buf, 0);
    if (n <= 0) {
      eof = true;
      break;
    }
    fwrite(buf, 1, (size_t)n, of);
    got += n;
    credit -= n;
  }
  fclose(of);
  close(fd);
  printf("bytes %lld\neof %d\n", got, eof ? 1 : 0);
  return 0;
}

int main(int argc, char **argv) {
  signal(SIGPIPE, SIG_IGN);
  long long duration = 3000;
  int i = 1;
  for (; i + 1 < argc && strncmp(argv[i], "--", 2) == 0; i += 2) {
    if (strcmp(argv[i], "--duration") == 0) {
      duration = atoll(argv[i + 1]);
    } else if (strcmp(argv[i], "--from") == 0) {
      use_from = true;
      from_addr.sin_family = AF_INET;
      if (inet_pton(AF_INET, argv[i + 1], &from_addr.sin_addr) != 1)
        return 2;
    } else {
      return 2;
    }
  }
  if (argc - i < 3) {
    fprintf(stderr, "usage: http_flood [--duration MS] [--from ADDR] HOST PORT MODE ARGS...\n");
    return 2;
  }
  server_addr.sin_family = AF_INET;
  server_addr.sin_port = htons((uint16_t)atoi(argv[i + 1]));
  if (inet_pton(AF_INET, argv[i], &server_addr.sin_addr) != 1)
    return 2;
  deadline_ms = now_ms() + duration;
  const char *mode = argv[i + 2];
  char **rest = argv + i + 3;
  int nrest = argc - i - 3;
  int rc = 2;
  if (strcmp(mode, "body") == 0 && nrest == 3)
    rc = mode_body(atoi(rest[0]) > MAX_CONNS ? MAX_CONNS : atoi(rest[0]), atoll(rest[1]), rest[2]);
  else if (strcmp(mode, "idle") == 0 && nrest == 1)
    rc = mode_idle(atoi(rest[0]) > MAX_CONNS ? MAX_CONNS : atoi(rest[0]));
  else if (strcmp(mode, "slowread") == 0 && nrest == 3)
    rc = mode_slowread(rest[0], rest[1], atoll(rest[2]));
  else if (strcmp(mode, "pipeline") == 0 && nrest == 3)
    rc = mode_pipeline(atoi(rest[0]), rest[1], rest[2]);
  fflush(stdout);
  return rc;
}
