/* The floor of bench/paired.lua (issue 43): the least an HTTP server of sandboxd's /exec protocol
 * can cost on this machine. No event loop, no Lua, no walls, no instance: a thread per keep-alive
 * connection parses each request with llhttp (the parser sandboxd uses), checks the bearer in
 * constant time and the x-thread-key, posix_spawns `bash -c COMMAND` (own session, stdin
 * /dev/null, stdout and stderr on pipes drained to EOF, waitpid — bench_paired's raw contender),
 * and answers one JSON document {stdout, stderr, exitCode, durationMs} with a Content-Length in
 * one writev. What it leaves out on purpose, because a faster server could too: heartbeats (a
 * command shorter than the heartbeat sends none) and the UTF-8 check of the output (it escapes
 * bytes, it does not validate them). The request's env is not applied (the bench sends {}).
 *
 *   SANDBOX_TOKEN=t bench_floor_server PORT_FILE
 *
 * GET /cpu (with the bearer) answers {"cpu_ns": the process's CPU time so far, "sleeps": its
 * voluntary context switches so far}.
 *
 *   SANDBOX_TOKEN=t bench_floor_server PORT_FILE relay|relay-json|relay-splice
 *
 * The relays (issue 43's 1 MB row: what bounds it on this machine, bench/README.md "What bounds
 * the 1 MB row"): the least a server could do with a long stdout. The stdout pipe is widened to
 * 1 MiB before the spawn (the command never waits on a 64 KiB pipe), and each read of it goes out
 * at once as one chunk of a chunked answer (one writev: head, chunk line, bytes, CRLF), while the
 * command runs; stderr and the exit follow as the last chunk. `relay` sends stdout's bytes as
 * they are (no escaping: the answer is JSON only for output without quotes, backslashes or
 * control bytes; it bounds the bytes' delivery alone); `relay-json` escapes each read with
 * sandboxd's own encoder (sb_json_text_into, src/json/json_text.c: the same bytes sandboxd
 * writes). `relay-splice` is `relay` without even the copy through the server: what the pipe
 * holds goes to the socket by splice(2), one chunk a wakeup. No heartbeats, no walls, no loop.
 *
 * Listens on 127.0.0.1, an ephemeral port, written to PORT_FILE once listening. */
#ifndef _GNU_SOURCE
#define _GNU_SOURCE
#endif
#include <arpa/inet.h>
#include <errno.h>
#include <fcntl.h>
#include <llhttp.h>
#include <stdbool.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <poll.h>
#include <pthread.h>
#include <signal.h>
#include <spawn.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>
#include <sys/ioctl.h>
#include <sys/resource.h>
#include <sys/socket.h>
#include <sys/uio.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#include "json/json_text.h"

static char *bearer;      /* "Bearer " TOKEN */
static size_t bearer_len;

/* A growable byte buffer; out of memory ends the bench (it is not a server anyone relies on). */
typedef struct {
  char *p;
  size_t len, cap;
} buf;

static void buf_reserve(buf *b, size_t more) {
  if (b->len + more <= b->cap)
    return;
  size_t cap = b->cap ? b->cap : 4096;
  while (cap < b->len + more)
    cap *= 2;
  b->p = realloc(b->p, cap);
  if (b->p == NULL)
    abort();
  b->cap = cap;
}

static void buf_add(buf *b, const char *s, size_t n) {
  if (n == 0) /* nothing to add: an empty buffer may have no memory yet (found by fuzz.floor_request) */
    return;
  buf_reserve(b, n);
  memcpy(b->p + b->len, s, n);
  b->len += n;
}

typedef struct {
  llhttp_t parser;
  buf field, value, url, body;
  int authorized, has_thread, complete;
} request;

static int ct_equal(const char *a, size_t an, const char *b, size_t bn) {
  /* constant time in the secret's length: every byte compared whatever differs */
  unsigned char diff = an != bn;
  for (size_t i = 0; i < bn; i++)
    diff |= (unsigned char)(a[i < an ? i : 0] ^ b[i]);
  return diff == 0;
}

static int on_url(llhttp_t *p, const char *at, size_t n) {
  buf_add(&((request *)p->data)->url, at, n);
  return 0;
}

static int on_field(llhttp_t *p, const char *at, size_t n) {
  buf_add(&((request *)p->data)->field, at, n);
  return 0;
}

static int on_value(llhttp_t *p, const char *at, size_t n) {
  buf_add(&((request *)p->data)->value, at, n);
  return 0;
}

static int on_value_complete(llhttp_t *p) {
  request *r = p->data;
  if (r->field.len == 13 && strncasecmp(r->field.p, "authorization", 13) == 0)
    r->authorized = ct_equal(r->value.p ? r->value.p : "", r->value.len, bearer, bearer_len);
  else if (r->field.len == 12 && strncasecmp(r->field.p, "x-thread-key", 12) == 0)
    r->has_thread = r->value.len > 0;
  r->field.len = r->value.len = 0;
  return 0;
}

static int on_body(llhttp_t *p, const char *at, size_t n) {
  buf_add(&((request *)p->data)->body, at, n);
  return 0;
}

static int on_complete(llhttp_t *p) {
  ((request *)p->data)->complete = 1;
  return HPE_PAUSED; /* answer this request before parsing a pipelined next one */
}

/* the parser's callbacks (tests/fuzz/fuzz_floor_request.c drives the same ones) */
static void floor_settings(llhttp_settings_t *settings) {
  llhttp_settings_init(settings);
  settings->on_url = on_url;
  settings->on_header_field = on_field;
  settings->on_header_value = on_value;
  settings->on_header_value_complete = on_value_complete;
  settings->on_body = on_body;
  settings->on_message_complete = on_complete;
}

/* The "command" string of the body, unescaped into out (NUL-terminated); -1 when absent. The
 * bench's commands are ASCII; \uXXXX above 0x7f is refused rather than encoded. */
static int json_command(const buf *body, buf *out) {
  if (body->p == NULL) /* no body at all */
    return -1;
  const char *s = body->p, *end = body->p + body->len;
  const char *k = memmem(s, body->len, "\"command\"", 9);
  if (k == NULL)
    return -1;
  const char *q = k + 9;
  while (q < end && (*q == ' ' || *q == ':' || *q == '\t'))
    q++;
  if (q >= end || *q != '"')
    return -1;
  out->len = 0;
  for (q++; q < end && *q != '"'; q++) {
    char c = *q;
    if (c == '\\' && q + 1 < end) {
      c = *++q;
      switch (c) {
      case 'n': c = '\n'; break;
      case 't': c = '\t'; break;
      case 'r': c = '\r'; break;
      case 'b': c = '\b'; break;
      case 'f': c = '\f'; break;
      case 'u': {
        if (end - q < 5)
          return -1;
        char hex[5] = {q[1], q[2], q[3], q[4], 0};
        long v = strtol(hex, NULL, 16);
        if (v <= 0 || v > 0x7f)
          return -1;
        c = (char)v;
        q += 4;
        break;
      }
      default: break; /* \" \\ \/ */
      }
    }
    buf_add(out, &c, 1);
  }
  if (q >= end)
    return -1;
  buf_add(out, "", 1);
  return 0;
}

/* bytes as the inside of a JSON string, escaped in one pass: runs of bytes that need no escape
 * (a table says which) copied whole, the rest escaped one by one */
static unsigned char plain[256]; /* filled by main before any thread reads it */

static void json_plain_init(void) {
  for (int c = 0x20; c < 256; c++)
    plain[c] = c != '"' && c != '\\';
}

static void json_escape(buf *out, const char *s, size_t n) {
  static const char hex[] = "0123456789abcdef";
  buf_reserve(out, n + n / 8 + 16);
  size_t i = 0;
  while (i < n) {
    size_t run = i;
    while (run < n && plain[(unsigned char)s[run]])
      run++;
    buf_add(out, s + i, run - i);
    if (run == n)
      break;
    unsigned char c = (unsigned char)s[run];
    char e[6] = {'\\', 'u', '0', '0', hex[c >> 4], hex[c & 15]};
    switch (c) {
    case '"': buf_add(out, "\\\"", 2); break;
    case '\\': buf_add(out, "\\\\", 2); break;
    case '\n': buf_add(out, "\\n", 2); break;
    case '\t': buf_add(out, "\\t", 2); break;
    case '\r': buf_add(out, "\\r", 2); break;
    default: buf_add(out, e, 6); break;
    }
    i = run + 1;
  }
}

/* The server itself; a fuzz build (FLOOR_FUZZ) takes the parsing and encoding above only. */
#ifndef FLOOR_FUZZ
static double now_ms(void) {
  struct timespec ts;
  clock_gettime(CLOCK_MONOTONIC, &ts);
  return ts.tv_sec * 1e3 + ts.tv_nsec / 1e6;
}

/* Starts `bash -c cmd` with stdin /dev/null and stdout, stderr into two new pipes (po, pe: the
 * reading ends stay open, the child's are closed here), stdout's pipe widened to `widen_to`
 * bytes first when > 0 (before the command writes a byte). The pid, or -1 when no spawn. */
static pid_t spawn_bash(const char *cmd, int po[2], int pe[2], int widen_to) {
  pid_t pid = -1;
  posix_spawn_file_actions_t fa;
  posix_spawnattr_t attr;
  posix_spawn_file_actions_init(&fa);
  posix_spawnattr_init(&attr);
  if (pipe2(po, O_CLOEXEC) == 0 && pipe2(pe, O_CLOEXEC) == 0) {
    if (widen_to > 0)
      (void)fcntl(po[0], F_SETPIPE_SZ, widen_to);
    posix_spawn_file_actions_addopen(&fa, 0, "/dev/null", O_RDONLY, 0);
    posix_spawn_file_actions_adddup2(&fa, po[1], 1);
    posix_spawn_file_actions_adddup2(&fa, pe[1], 2);
    posix_spawnattr_setflags(&attr, POSIX_SPAWN_SETSID);
    char *argv[] = {"bash", "-c", (char *)cmd, NULL};
    char *envp[] = {"PATH=/usr/local/bin:/usr/bin:/bin", NULL};
    if (posix_spawn(&pid, "/bin/bash", &fa, &attr, argv, envp) != 0)
      pid = -1;
  }
  /* the child's ends: EOF comes once it and its children have closed theirs */
  if (po[1] >= 0)
    close(po[1]);
  if (pe[1] >= 0)
    close(pe[1]);
  po[1] = pe[1] = -1;
  posix_spawn_file_actions_destroy(&fa);
  posix_spawnattr_destroy(&attr);
  return pid;
}

/* Runs `bash -c cmd`, both pipes drained to EOF; the exit code (128+signal), -1 when no spawn. */
static int run(const char *cmd, buf *out, buf *err) {
  int po[2] = {-1, -1}, pe[2] = {-1, -1}, code = -1;
  pid_t pid = spawn_bash(cmd, po, pe, 0);
  if (pid < 0)
    goto done;
  struct pollfd p[2] = {{po[0], POLLIN, 0}, {pe[0], POLLIN, 0}};
  buf *sink[2] = {out, err};
  for (int open_n = 2; open_n > 0;) {
    if (poll(p, 2, -1) < 0) {
      if (errno == EINTR)
        continue;
      break;
    }
    for (int i = 0; i < 2; i++) {
      if (p[i].fd < 0 || !(p[i].revents & (POLLIN | POLLHUP | POLLERR)))
        continue;
      buf_reserve(sink[i], 65536);
      ssize_t n = read(p[i].fd, sink[i]->p + sink[i]->len, sink[i]->cap - sink[i]->len);
      if (n > 0) {
        sink[i]->len += (size_t)n;
      } else if (n == 0 || errno != EINTR) {
        p[i].fd = -1;
        open_n--;
      }
    }
  }
  int status;
  while (waitpid(pid, &status, 0) < 0 && errno == EINTR)
    ;
  code = WIFEXITED(status) ? WEXITSTATUS(status) : 128 + WTERMSIG(status);
done:
  for (int i = 0; i < 2; i++) {
    if (po[i] >= 0)
      close(po[i]);
    if (pe[i] >= 0)
      close(pe[i]);
  }
  return code;
}

static int write_all(int fd, struct iovec *iov, int n) {
  while (n > 0) {
    ssize_t w = writev(fd, iov, n);
    if (w < 0) {
      if (errno == EINTR)
        continue;
      return -1;
    }
    while (n > 0 && (size_t)w >= iov->iov_len) {
      w -= (ssize_t)iov->iov_len;
      iov++;
      n--;
    }
    if (n > 0) {
      iov->iov_base = (char *)iov->iov_base + w;
      iov->iov_len -= (size_t)w;
    }
  }
  return 0;
}

static int answer(int fd, int status, const char *body, size_t len, int keep_alive) {
  char head[256];
  const char *reason = status == 200 ? "OK" : status == 401 ? "Unauthorized" : status == 400 ? "Bad Request" : "Not Found";
  int hn = snprintf(head, sizeof head,
                    "HTTP/1.1 %d %s\r\ncontent-type: application/json\r\ncache-control: no-store\r\n"
                    "content-length: %zu\r\nconnection: %s\r\n\r\n",
                    status, reason, len, keep_alive ? "keep-alive" : "close");
  struct iovec iov[2] = {{head, (size_t)hn}, {(void *)body, len}};
  return write_all(fd, iov, 2);
}

/* ---- the relays ------------------------------------------------------------------------------ */

/* what a request's output becomes: one document after the end (the floor), or chunks as it comes */
static enum { MODE_FLOOR, MODE_RELAY, MODE_RELAY_JSON, MODE_RELAY_SPLICE } mode;

/* RELAY_READ: the widened pipe's capacity, so that a read takes all it holds; RELAY_STEP: what one
 * chunk carries at most, sandboxd's own step (policies/timeouts.lua stream_step_bytes: a 1 MiB
 * writev, or 128 KiB steps, cost more CPU and time in sandboxd, bench/README.md) */
enum { RELAY_READ = 1 << 20, RELAY_STEP = 32 * 1024 };

static const char relay_head[] = "HTTP/1.1 200 OK\r\ncontent-type: application/json\r\n"
                                 "cache-control: no-store\r\ntransfer-encoding: chunked\r\n\r\n";

/* One chunk: [head when first] chunk line, bytes, CRLF, [the body's end when last], one writev. */
static int relay_chunk(int fd, int *head_sent, const char *p, size_t n, int last) {
  char line[32];
  int ln = snprintf(line, sizeof line, "%zx\r\n", n);
  struct iovec iov[5];
  int k = 0;
  if (!*head_sent)
    iov[k++] = (struct iovec){(void *)relay_head, sizeof relay_head - 1};
  *head_sent = 1;
  iov[k++] = (struct iovec){line, (size_t)ln};
  iov[k++] = (struct iovec){(void *)p, n};
  iov[k++] = (struct iovec){"\r\n", 2};
  if (last)
    iov[k++] = (struct iovec){"0\r\n\r\n", 5};
  return write_all(fd, iov, k);
}

typedef struct {
  char *in;   /* RELAY_READ bytes: a read of stdout, after the carry */
  size_t carry; /* relay-json: the start of a UTF-8 sequence cut by the last read's end */
  char *enc;  /* relay-json: room for the encoding of a whole read */
  bool valid;
} relay_bufs;

/* stdout's next bytes to the client: as they are, or escaped; -1 when the client is gone */
static int relay_out(int fd, int *head_sent, relay_bufs *b, size_t n) {
  size_t avail = b->carry + n, from = 0;
  if (mode == MODE_RELAY) {
    if (*head_sent == 0 && relay_chunk(fd, head_sent, "{\"stdout\":\"", 11, 0) != 0)
      return -1;
    for (; from < avail; from += RELAY_STEP) {
      size_t piece = avail - from < RELAY_STEP ? avail - from : RELAY_STEP;
      if (relay_chunk(fd, head_sent, b->in + from, piece, 0) != 0)
        return -1;
    }
    return 0;
  }
  while (from < avail) {
    size_t at = 0, written;
    if (*head_sent == 0) {
      memcpy(b->enc, "{\"stdout\":\"", 11);
      at = 11;
    }
    size_t piece = avail - from < RELAY_STEP ? avail - from : RELAY_STEP;
    size_t taken = sb_json_text_into(b->enc + at, b->in + from, piece, false, &b->valid, &written);
    if (at + written > 0 && relay_chunk(fd, head_sent, b->enc, at + written, 0) != 0)
      return -1;
    from += taken;
    if (taken < piece && from + (piece - taken) == avail)
      break; /* a UTF-8 sequence cut at the read's end: kept for the next read */
  }
  b->carry = avail - from;
  memmove(b->in, b->in + from, b->carry);
  return 0;
}

/* relay-splice: what the pipe holds moved to the socket by splice (no copy through this process:
 * the pipe's pages are handed to the socket), framed as one chunk; 0 at stdout's end, -1 when the
 * client is gone */
static ssize_t relay_splice(int fd, int *head_sent, int pipe_fd) {
  int avail = 0;
  if (ioctl(pipe_fd, FIONREAD, &avail) != 0 || avail <= 0)
    return 0; /* readable with nothing in it: the writers are gone */
  char line[160];
  int ln = 0;
  if (!*head_sent)
    ln = snprintf(line, sizeof line, "%s%x\r\n{\"stdout\":\"\r\n", relay_head, 11);
  *head_sent = 1;
  ln += snprintf(line + ln, sizeof line - (size_t)ln, "%x\r\n", (unsigned)avail);
  if (send(fd, line, (size_t)ln, MSG_MORE) != ln)
    return -1;
  for (int left = avail; left > 0;) {
    ssize_t n = splice(pipe_fd, NULL, fd, NULL, (size_t)left, SPLICE_F_MOVE | SPLICE_F_MORE);
    if (n <= 0 && !(n < 0 && errno == EINTR))
      return -1;
    left -= n > 0 ? (int)n : 0;
  }
  return send(fd, "\r\n", 2, 0) == 2 ? avail : -1;
}

/* `bash -c cmd` with stdout relayed as it comes (the relays above); -1 when the client is gone */
static int relay(int fd, const char *cmd, relay_bufs *b, buf *err, buf *doc) {
  int po[2] = {-1, -1}, pe[2] = {-1, -1}, code = 127, rc = 0, head_sent = 0;
  double t0 = now_ms();
  b->carry = 0;
  b->valid = true;
  pid_t pid = spawn_bash(cmd, po, pe, RELAY_READ);
  struct pollfd p[2] = {{pid > 0 ? po[0] : -1, POLLIN, 0}, {pid > 0 ? pe[0] : -1, POLLIN, 0}};
  err->len = 0;
  for (int open_n = pid > 0 ? 2 : 0; open_n > 0;) {
    if (poll(p, 2, -1) < 0) {
      if (errno == EINTR)
        continue;
      break;
    }
    /* (a client gone: stdout is still read to its end and dropped, so that the command ends) */
    if (p[0].fd >= 0 && (p[0].revents & (POLLIN | POLLHUP | POLLERR)) && mode == MODE_RELAY_SPLICE &&
        rc == 0) {
      ssize_t n = relay_splice(fd, &head_sent, p[0].fd);
      if (n < 0)
        rc = -1;
      else if (n == 0)
        p[0].fd = -1, open_n--;
    } else if (p[0].fd >= 0 && (p[0].revents & (POLLIN | POLLHUP | POLLERR))) {
      ssize_t n = read(p[0].fd, b->in + b->carry, RELAY_READ);
      if (n > 0 && rc == 0)
        rc = relay_out(fd, &head_sent, b, (size_t)n);
      else if (n == 0 || (n < 0 && errno != EINTR))
        p[0].fd = -1, open_n--;
    }
    if (p[1].fd >= 0 && (p[1].revents & (POLLIN | POLLHUP | POLLERR))) {
      buf_reserve(err, 65536);
      ssize_t n = read(p[1].fd, err->p + err->len, err->cap - err->len);
      if (n > 0)
        err->len += (size_t)n;
      else if (n == 0 || errno != EINTR)
        p[1].fd = -1, open_n--;
    }
  }
  if (pid > 0) {
    int status;
    while (waitpid(pid, &status, 0) < 0 && errno == EINTR)
      ;
    code = WIFEXITED(status) ? WEXITSTATUS(status) : 128 + WTERMSIG(status);
  }
  if (po[0] >= 0)
    close(po[0]);
  if (pe[0] >= 0)
    close(pe[0]);
  /* the last chunk: a cut sequence left at stdout's end, stderr, the exit */
  doc->len = 0;
  if (!head_sent)
    buf_add(doc, "{\"stdout\":\"", 11);
  if (b->carry > 0) { /* a sequence stdout's end left cut: U+FFFD, as sandboxd writes it */
    size_t written;
    (void)sb_json_text_into(b->enc, b->in, b->carry, true, &b->valid, &written);
    buf_add(doc, b->enc, written);
  }
  buf_add(doc, "\",\"stderr\":\"", 12);
  json_escape(doc, err->p, err->len);
  char tail[96];
  int tn = snprintf(tail, sizeof tail, "\",\"exitCode\":%d,\"durationMs\":%ld}", code,
                    (long)(now_ms() - t0 + 0.5));
  buf_add(doc, tail, (size_t)tn);
  return rc == 0 ? relay_chunk(fd, &head_sent, doc->p, doc->len, 1) : -1;
}

/* One request, parsed in r: its answer written; -1 when the connection is to close. */
static int handle(int fd, request *r, buf *cmd, buf *out, buf *err, buf *doc, relay_bufs *rb) {
  int keep = llhttp_should_keep_alive(&r->parser);
  if (!r->authorized) {
    static const char e[] = "{\"error\":\"unauthorized\"}";
    return answer(fd, 401, e, sizeof e - 1, keep) == 0 && keep ? 0 : -1;
  }
  if (llhttp_get_method(&r->parser) == HTTP_GET && r->url.len == 4 && memcmp(r->url.p, "/cpu", 4) == 0) {
    /* the process's CPU time, its ended connection threads included (paired.lua's CPU per request:
     * /proc/PID/task lists live threads only, and a connection's thread ends with its client) */
    struct timespec ts;
    clock_gettime(CLOCK_PROCESS_CPUTIME_ID, &ts);
    /* and its sleeps so far (voluntary switches, ended threads' included): its wakeups */
    struct rusage ru;
    getrusage(RUSAGE_SELF, &ru);
    char doc_cpu[96];
    int dn = snprintf(doc_cpu, sizeof doc_cpu, "{\"cpu_ns\":%lld,\"sleeps\":%ld}",
                      (long long)ts.tv_sec * 1000000000LL + ts.tv_nsec, ru.ru_nvcsw);
    return answer(fd, 200, doc_cpu, (size_t)dn, keep) == 0 && keep ? 0 : -1;
  }
  if (llhttp_get_method(&r->parser) != HTTP_POST || r->url.len != 5 || memcmp(r->url.p, "/exec", 5) != 0 ||
      !r->has_thread) {
    static const char e[] = "{\"error\":\"POST /exec with x-thread-key\"}";
    return answer(fd, 404, e, sizeof e - 1, keep) == 0 && keep ? 0 : -1;
  }
  if (json_command(&r->body, cmd) != 0) {
    static const char e[] = "{\"error\":\"body must be JSON with a command\"}";
    return answer(fd, 400, e, sizeof e - 1, keep) == 0 && keep ? 0 : -1;
  }
  if (mode != MODE_FLOOR) { /* a relay answers chunked: the connection stays open after it */
    if (rb->in == NULL && ((rb->in = malloc(RELAY_READ + 4)) == NULL ||
                           (rb->enc = malloc(11 + SB_JSON_TEXT_MAX_GROWTH * (size_t)RELAY_STEP)) == NULL))
      abort();
    return relay(fd, cmd->p, rb, err, doc) == 0 && keep ? 0 : -1;
  }
  double t0 = now_ms();
  out->len = err->len = doc->len = 0;
  int code = run(cmd->p, out, err);
  char tail[96];
  int tn = snprintf(tail, sizeof tail, "\",\"exitCode\":%d,\"durationMs\":%ld}", code < 0 ? 127 : code,
                    (long)(now_ms() - t0 + 0.5));
  buf_add(doc, "{\"stdout\":\"", 11);
  json_escape(doc, out->p, out->len);
  buf_add(doc, "\",\"stderr\":\"", 12);
  json_escape(doc, err->p, err->len);
  buf_add(doc, tail, (size_t)tn);
  return answer(fd, 200, doc->p, doc->len, keep) == 0 && keep ? 0 : -1;
}

static void *serve(void *arg) {
  int fd = (int)(intptr_t)arg;
  llhttp_settings_t settings;
  floor_settings(&settings);
  request r;
  memset(&r, 0, sizeof r);
  buf cmd = {0}, out = {0}, err = {0}, doc = {0};
  relay_bufs rb = {0};
  llhttp_init(&r.parser, HTTP_REQUEST, &settings);
  r.parser.data = &r;
  char in[16384];
  for (;;) {
    ssize_t n = read(fd, in, sizeof in);
    if (n < 0 && errno == EINTR)
      continue;
    if (n <= 0)
      break;
    const char *at = in, *end = in + n;
    int closing = 0;
    while (at < end && !closing) {
      llhttp_errno_t e = llhttp_execute(&r.parser, at, (size_t)(end - at));
      if (e == HPE_OK)
        break;
      if (e != HPE_PAUSED) {
        closing = 1;
        break;
      }
      at = llhttp_get_error_pos(&r.parser);
      closing = handle(fd, &r, &cmd, &out, &err, &doc, &rb) != 0;
      r.url.len = r.body.len = r.field.len = r.value.len = 0;
      r.authorized = r.has_thread = r.complete = 0;
      llhttp_resume(&r.parser);
    }
    if (closing)
      break;
  }
  close(fd);
  free(r.field.p);
  free(r.value.p);
  free(r.url.p);
  free(r.body.p);
  free(cmd.p);
  free(out.p);
  free(err.p);
  free(doc.p);
  free(rb.in);
  free(rb.enc);
  return NULL;
}

int main(int argc, char **argv) {
  if (argc == 3 && strcmp(argv[2], "relay") == 0)
    mode = MODE_RELAY;
  else if (argc == 3 && strcmp(argv[2], "relay-json") == 0)
    mode = MODE_RELAY_JSON;
  else if (argc == 3 && strcmp(argv[2], "relay-splice") == 0)
    mode = MODE_RELAY_SPLICE;
  else if (argc != 2) {
    fprintf(stderr, "usage: SANDBOX_TOKEN=t %s PORT_FILE [relay|relay-json|relay-splice]\n", argv[0]);
    return 2;
  }
  const char *token = getenv("SANDBOX_TOKEN");
  if (token == NULL || *token == '\0') {
    fprintf(stderr, "bench_floor_server: SANDBOX_TOKEN is not set\n");
    return 2;
  }
  if (asprintf(&bearer, "Bearer %s", token) < 0)
    return 1;
  bearer_len = strlen(bearer);
  json_plain_init();
  signal(SIGPIPE, SIG_IGN); /* a client gone mid-answer ends its connection, not the server */
  int ls = socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
  struct sockaddr_in a = {.sin_family = AF_INET, .sin_port = 0};
  a.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  socklen_t alen = sizeof a;
  if (ls < 0 || bind(ls, (struct sockaddr *)&a, sizeof a) != 0 || listen(ls, 128) != 0 ||
      getsockname(ls, (struct sockaddr *)&a, &alen) != 0) {
    perror("bench_floor_server: listen");
    return 1;
  }
  /* the port file appears whole: written beside it, then renamed */
  char tmp[4096];
  snprintf(tmp, sizeof tmp, "%s.tmp", argv[1]);
  FILE *f = fopen(tmp, "w");
  if (f == NULL || fprintf(f, "%d", ntohs(a.sin_port)) < 0 || fclose(f) != 0 || rename(tmp, argv[1]) != 0) {
    perror("bench_floor_server: port file");
    return 1;
  }
  for (;;) {
    int c = accept4(ls, NULL, NULL, SOCK_CLOEXEC);
    if (c < 0) {
      if (errno == EINTR || errno == ECONNABORTED)
        continue;
      perror("bench_floor_server: accept");
      return 1;
    }
    int one = 1;
    setsockopt(c, IPPROTO_TCP, TCP_NODELAY, &one, sizeof one);
    pthread_t t;
    pthread_attr_t ta;
    pthread_attr_init(&ta);
    pthread_attr_setdetachstate(&ta, PTHREAD_CREATE_DETACHED);
    if (pthread_create(&t, &ta, serve, (void *)(intptr_t)c) != 0)
      close(c);
    pthread_attr_destroy(&ta);
  }
}
#endif
