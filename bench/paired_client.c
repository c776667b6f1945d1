/* The paired client of bench/paired.lua: one request to each contender in turn, so that load
 * changes on a shared machine hit every contender alike. Contenders:
 *   http:NAME:PORT  POST /exec {"command": CMD} to 127.0.0.1:PORT over one keep-alive
 *                   connection (re-opened only when the server closes it; counted)
 *   raw:NAME:CMD    posix_spawn of `bash -c CMD` (own session, stdin /dev/null, stdout and
 *                   stderr on pipes drained to EOF, waitpid) — the reference
 *   rawwide:NAME:CMD  the same with the stdout pipe widened to 1 MiB before the spawn (the 1 MB
 *                   row's bound: the megabyte drained without the command waiting on 64 KiB)
 *
 *   bench_paired seq  TOKEN CMD N CONTENDER...           N rounds; per contender the median µs
 *   bench_paired rate TOKEN CMD SLICE_S CLIENTS PAIRS CONTENDER...
 *                   PAIRS rounds of one SLICE_S slice per contender with CLIENTS threads (each its
 *                   own connection) running CMD back to back; per contender the median rate/s
 * One JSON line on stdout. A request that does not answer exitCode 0 counts as an error. */
#ifndef _GNU_SOURCE
#define _GNU_SOURCE
#endif
#include <arpa/inet.h>
#include <errno.h>
#include <fcntl.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <poll.h>
#include <pthread.h>
#include <spawn.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>
#include <sys/socket.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

enum { MAX_CONTENDERS = 12, MAX_CLIENTS = 64, WIDE_PIPE = 1 << 20 };

typedef struct {
  int is_raw;
  int wide; /* rawwide: the stdout pipe widened before the spawn */
  char name[32];
  int port;
  const char *cmd; /* raw: its own command */
} contender;

static const char *token, *command;
static char body_json[8192];

static double now_us(void) {
  struct timespec ts;
  clock_gettime(CLOCK_MONOTONIC, &ts);
  return ts.tv_sec * 1e6 + ts.tv_nsec / 1e3;
}

/* ---- raw spawn ----------------------------------------------------------------------------- */

static int raw_once(const char *cmd, int wide) {
  int out[2], err[2];
  if (pipe2(out, O_CLOEXEC) != 0 || pipe2(err, O_CLOEXEC) != 0)
    return -1;
  if (wide)
    (void)fcntl(out[0], F_SETPIPE_SZ, WIDE_PIPE);
  posix_spawn_file_actions_t fa;
  posix_spawn_file_actions_init(&fa);
  posix_spawn_file_actions_addopen(&fa, 0, "/dev/null", O_RDONLY, 0);
  posix_spawn_file_actions_adddup2(&fa, out[1], 1);
  posix_spawn_file_actions_adddup2(&fa, err[1], 2);
  posix_spawnattr_t attr;
  posix_spawnattr_init(&attr);
  posix_spawnattr_setflags(&attr, POSIX_SPAWN_SETSID);
  char *argv[] = {"bash", "-c", (char *)cmd, NULL};
  char *envp[] = {"PATH=/usr/local/bin:/usr/bin:/bin", NULL};
  pid_t pid;
  int rc = posix_spawn(&pid, "/bin/bash", &fa, &attr, argv, envp);
  posix_spawn_file_actions_destroy(&fa);
  posix_spawnattr_destroy(&attr);
  close(out[1]);
  close(err[1]);
  if (rc != 0) {
    close(out[0]);
    close(err[0]);
    return -1;
  }
  struct pollfd p[2] = {{out[0], POLLIN, 0}, {err[0], POLLIN, 0}};
  int open_n = 2;
  static __thread char buf[WIDE_PIPE]; /* a read takes what a widened pipe holds */
  while (open_n > 0) {
    if (poll(p, 2, -1) < 0 && errno != EINTR)
      break;
    for (int i = 0; i < 2; i++)
      if (p[i].fd >= 0 && (p[i].revents & (POLLIN | POLLHUP)) && read(p[i].fd, buf, sizeof buf) <= 0) {
        close(p[i].fd);
        p[i].fd = -1;
        open_n--;
      }
  }
  int status;
  waitpid(pid, &status, 0);
  return WIFEXITED(status) && WEXITSTATUS(status) == 0 ? 0 : -1;
}

/* ---- HTTP over one kept-alive connection ------------------------------------------------------ */

typedef struct {
  int fd;
  int port;
  long reconnects;
  char *buf;
  size_t len, cap;
} conn;

static int conn_open(conn *c) {
  c->fd = socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
  struct sockaddr_in a = {.sin_family = AF_INET, .sin_port = htons((uint16_t)c->port)};
  a.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  if (connect(c->fd, (struct sockaddr *)&a, sizeof a) != 0) {
    close(c->fd);
    c->fd = -1;
    return -1;
  }
  int one = 1;
  setsockopt(c->fd, IPPROTO_TCP, TCP_NODELAY, &one, sizeof one);
  c->reconnects++;
  c->len = 0;
  return 0;
}

static int fill(conn *c) {
  if (c->cap - c->len < 65536) {
    c->cap = c->cap ? c->cap * 2 : 1 << 20;
    c->buf = realloc(c->buf, c->cap);
  }
  ssize_t n = read(c->fd, c->buf + c->len, c->cap - c->len);
  if (n <= 0)
    return -1;
  c->len += (size_t)n;
  return 0;
}

static const char *find_nocase(const char *hay, size_t n, const char *needle) {
  size_t m = strlen(needle);
  for (size_t i = 0; i + m <= n; i++)
    if (strncasecmp(hay + i, needle, m) == 0)
      return hay + i;
  return NULL;
}

/* One POST /exec; 0 when the answer is 200 with exitCode 0. */
static int http_once(conn *c, const char *thread) {
  if (c->fd < 0 && conn_open(c) != 0)
    return -1;
  char req[10000];
  int n = snprintf(req, sizeof req,
                   "POST /exec HTTP/1.1\r\nHost: 127.0.0.1\r\nAuthorization: Bearer %s\r\n"
                   "x-thread-key: %s\r\ncontent-type: application/json\r\ncontent-length: %zu\r\n\r\n%s",
                   token, thread, strlen(body_json), body_json);
  if (write(c->fd, req, (size_t)n) != n) { /* the server closed an idle connection: once more */
    close(c->fd);
    if (conn_open(c) != 0 || write(c->fd, req, (size_t)n) != n)
      return -1;
  }
  c->len = 0;
  const char *end;
  while ((end = memmem(c->buf ? c->buf : "", c->len, "\r\n\r\n", 4)) == NULL)
    if (fill(c) != 0)
      return -1;
  size_t head_len = (size_t)(end - c->buf) + 4;
  int ok = c->len > 12 && memcmp(c->buf + 9, "200", 3) == 0;
  int closing = find_nocase(c->buf, head_len, "\r\nconnection: close") != NULL;
  int chunked = find_nocase(c->buf, head_len, "\r\ntransfer-encoding: chunked") != NULL;
  const char *cl = find_nocase(c->buf, head_len, "\r\ncontent-length:");
  /* the body: de-chunked in place into body[0..blen) */
  size_t at = head_len, blen = 0;
  char *body = c->buf + head_len;
  if (chunked) {
    for (;;) {
      const char *eol;
      while ((eol = memmem(c->buf + at, c->len - at, "\r\n", 2)) == NULL)
        if (fill(c) != 0)
          return -1;
      body = c->buf + head_len;
      size_t size = strtoul(c->buf + at, NULL, 16);
      size_t data = (size_t)(eol - c->buf) + 2;
      while (c->len < data + size + 2)
        if (fill(c) != 0)
          return -1;
      body = c->buf + head_len;
      memmove(body + blen, c->buf + data, size);
      blen += size;
      at = data + size + 2;
      if (size == 0)
        break;
    }
  } else if (cl != NULL) {
    size_t want = strtoul(cl + 17, NULL, 10);
    while (c->len < head_len + want)
      if (fill(c) != 0)
        return -1;
    body = c->buf + head_len;
    blen = want;
  }
  if (closing) {
    close(c->fd);
    c->fd = -1;
  }
  return ok && memmem(body, blen, "\"exitCode\":0", 12) != NULL ? 0 : -1;
}

/* ---- modes ----------------------------------------------------------------------------------- */

static int cmp_double(const void *a, const void *b) {
  double x = *(const double *)a, y = *(const double *)b;
  return x < y ? -1 : x > y;
}

static double median(double *v, int n) {
  qsort(v, (size_t)n, sizeof *v, cmp_double);
  return n % 2 ? v[n / 2] : (v[n / 2 - 1] + v[n / 2]) / 2;
}

static int parse_contender(const char *s, contender *k) {
  memset(k, 0, sizeof *k);
  const char *a = strchr(s, ':');
  const char *b = a ? strchr(a + 1, ':') : NULL;
  if (!a || !b || (size_t)(b - a - 1) >= sizeof k->name)
    return -1;
  memcpy(k->name, a + 1, (size_t)(b - a - 1));
  k->wide = strncmp(s, "rawwide:", 8) == 0;
  k->is_raw = strncmp(s, "raw:", 4) == 0 || k->wide;
  if (k->is_raw)
    k->cmd = b + 1;
  else
    k->port = atoi(b + 1);
  return 0;
}

typedef struct {
  contender *k;
  conn c;
  char thread[32];
  double until;
  long done, errors;
} worker;

static void *work(void *arg) {
  worker *w = arg;
  while (now_us() < w->until) {
    int rc = w->k->is_raw ? raw_once(w->k->cmd, w->k->wide) : http_once(&w->c, w->thread);
    if (rc == 0)
      w->done++;
    else
      w->errors++;
  }
  return NULL;
}

int main(int argc, char **argv) {
  if (argc < 5)
    return 2;
  const char *mode = argv[1];
  token = argv[2];
  command = argv[3];
  /* the command as a JSON string: the bench's commands are plain ASCII without quotes */
  snprintf(body_json, sizeof body_json, "{\"command\":\"%s\",\"env\":{}}", command);
  int first = strcmp(mode, "seq") == 0 ? 5 : 7;
  contender ks[MAX_CONTENDERS];
  int nk = 0;
  for (int i = first; i < argc && nk < MAX_CONTENDERS; i++)
    if (parse_contender(argv[i], &ks[nk++]) != 0)
      return 2;
  if (strcmp(mode, "seq") == 0) {
    int rounds = atoi(argv[4]);
    double *t[MAX_CONTENDERS];
    conn cs[MAX_CONTENDERS];
    long errors[MAX_CONTENDERS] = {0};
    for (int j = 0; j < nk; j++) {
      t[j] = calloc((size_t)rounds, sizeof(double));
      cs[j] = (conn){.fd = -1, .port = ks[j].port};
      /* warm up: the instance wakes, the connection opens */
      if (ks[j].is_raw ? raw_once(ks[j].cmd, ks[j].wide) : http_once(&cs[j], "paired-seq"))
        errors[j]++;
    }
    for (int r = 0; r < rounds; r++)
      for (int j = 0; j < nk; j++) {
        double t0 = now_us();
        if (ks[j].is_raw ? raw_once(ks[j].cmd, ks[j].wide) : http_once(&cs[j], "paired-seq"))
          errors[j]++;
        t[j][r] = now_us() - t0;
      }
    printf("{\"mode\":\"seq\",\"rounds\":%d", rounds);
    for (int j = 0; j < nk; j++)
      printf(",\"%s\":{\"median_us\":%.1f,\"errors\":%ld,\"connections\":%ld}", ks[j].name,
             median(t[j], rounds), errors[j], ks[j].is_raw ? 0 : cs[j].reconnects);
    printf("}\n");
    return 0;
  }
  if (strcmp(mode, "rate") == 0 && argc >= 8) {
    double slice = atof(argv[4]);
    int clients = atoi(argv[5]), pairs = atoi(argv[6]);
    if (clients < 1 || clients > MAX_CLIENTS || pairs < 1)
      return 2;
    double *rates[MAX_CONTENDERS];
    long errors[MAX_CONTENDERS] = {0}, conns[MAX_CONTENDERS] = {0};
    static worker ws[MAX_CONTENDERS][MAX_CLIENTS];
    for (int j = 0; j < nk; j++) {
      rates[j] = calloc((size_t)pairs, sizeof(double));
      for (int i = 0; i < clients; i++) {
        ws[j][i] = (worker){.k = &ks[j], .c = {.fd = -1, .port = ks[j].port}};
        snprintf(ws[j][i].thread, sizeof ws[j][i].thread, "paired-%d", i);
        /* warm up: each client's instance wakes and its connection opens before the slices */
        worker *w = &ws[j][i];
        if (w->k->is_raw ? raw_once(w->k->cmd, w->k->wide) : http_once(&w->c, w->thread))
          w->errors++;
      }
    }
    for (int p = 0; p < pairs; p++)
      for (int j = 0; j < nk; j++) {
        pthread_t th[MAX_CLIENTS];
        long before = 0;
        for (int i = 0; i < clients; i++)
          before += ws[j][i].done;
        double t0 = now_us();
        for (int i = 0; i < clients; i++) {
          ws[j][i].until = t0 + slice * 1e6;
          pthread_create(&th[i], NULL, work, &ws[j][i]);
        }
        long after = 0;
        for (int i = 0; i < clients; i++) {
          pthread_join(th[i], NULL);
          after += ws[j][i].done;
        }
        rates[j][p] = (double)(after - before) / ((now_us() - t0) / 1e6);
      }
    printf("{\"mode\":\"rate\",\"clients\":%d,\"slice_s\":%g,\"pairs\":%d", clients, slice, pairs);
    for (int j = 0; j < nk; j++) {
      for (int i = 0; i < clients; i++) {
        errors[j] += ws[j][i].errors;
        conns[j] += ws[j][i].c.reconnects;
      }
      printf(",\"%s\":{\"median_per_s\":%.1f,\"errors\":%ld,\"connections\":%ld}", ks[j].name,
             median(rates[j], pairs), errors[j], conns[j]);
    }
    printf("}\n");
    return 0;
  }
  return 2;
}
