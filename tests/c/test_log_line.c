/* The log line made by hand (src/log/log_line.c) has the bytes of the printf/strftime formatter
 * it replaced, kept here verbatim but for its clock (an argument): many lines of random fields —
 * UTF-8, control characters, quotes, backslashes, '=', empty strings, raw values — in both
 * formats, on the journal and not, at random times and across second and year boundaries; the
 * timestamp; integers at their limits; a Lua float's text (tenths, big, small, negative, -0.0,
 * NaN, inf); and sb_log_write itself, with registered secrets, read back from fd 2. */
#include "log/log.h"
#include "log/log_line.h"
#include "log/log_lua.h"
#include "log_line_reference.h"

#include <lua.h>
#include <limits.h>
#include <math.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/time.h>
#include <time.h>
#include <unistd.h>

#include "check.h"

static void old_scrub(strbuf *b, const char **secrets, size_t n_secrets) {
  static const char mask[] = "[redacted]";
  for (size_t i = 0; i < n_secrets && b->data != NULL; i++) {
    const char *secret = secrets[i];
    size_t sl = strlen(secret);
    if (sl == 0 || strstr(b->data, secret) == NULL)
      continue;
    strbuf out = {0};
    const char *from = b->data, *hit;
    while ((hit = strstr(from, secret)) != NULL) {
      sb_put(&out, from, (size_t)(hit - from));
      sb_puts(&out, mask);
      from = hit + sl;
    }
    sb_puts(&out, from);
    free(b->data);
    *b = out;
  }
}

static void old_float_text(char *buf, size_t n, double v) {
  snprintf(buf, n, LUA_NUMBER_FMT, (LUAI_UACNUMBER)v);
  if (buf[strspn(buf, "-0123456789")] == '\0')
    strncat(buf, ".0", n - strlen(buf) - 1);
}

/* ---- random inputs (a fixed seed: a failure is the same on every run) ---------------------- */

static uint64_t rng_state = 0x9e3779b97f4a7c15ULL;

static uint64_t rnd(void) { /* xorshift64* */
  rng_state ^= rng_state >> 12;
  rng_state ^= rng_state << 25;
  rng_state ^= rng_state >> 27;
  return rng_state * 0x2545f4914f6cdd1dULL;
}

static size_t rnd_below(size_t n) { return (size_t)(rnd() % n); }

/* A string of up to max bytes: plain words, the bytes escaping and quoting look at, every
 * control byte, UTF-8 of two to four bytes, and stray high bytes. */
static void rnd_text(char *out, size_t max) {
  static const char *pieces[] = {"a", "thread-7", " ", "=", "\"", "\\", "\n", "\r", "\t",
                                 "\x01", "\x1f", "\x7f", "é", "→", "𝄞", "\xff", "\x80",
                                 "/exec", "[redacted]", "127.0.0.1:5", "0", "-", "{}", ":"};
  size_t len = 0, count = rnd_below(12);
  for (size_t i = 0; i < count; i++) {
    const char *piece;
    char one[2] = {0};
    if (rnd_below(4) == 0) {
      one[0] = (char)(1 + rnd_below(255)); /* any byte but NUL */
      piece = one;
    } else {
      piece = pieces[rnd_below(sizeof pieces / sizeof pieces[0])];
    }
    size_t pl = strlen(piece);
    if (len + pl >= max)
      break;
    memcpy(out + len, piece, pl);
    len += pl;
  }
  out[len] = '\0';
}

static struct timeval rnd_time(void) {
  static const long usecs[] = {0, 999, 1000, 999999, 500000, 1};
  struct timeval tv;
  tv.tv_sec = (time_t)rnd_below(4102444800ULL); /* 1970 … 2100 */
  tv.tv_usec = rnd_below(2) ? usecs[rnd_below(6)] : (long)rnd_below(1000000);
  return tv;
}

static void compare_line(bool json, bool journal, const char *level, const char *event,
                         const sb_log_field *f, size_t n, struct timeval tv) {
  strbuf want = {0};
  old_format(&want, json, journal, level, event, f, n, tv);
  sb_log_line got;
  sb_log_line_init(&got);
  sb_log_line_format(&got, (sb_log_line_style){.json = json, .journal = journal}, level, event,
                     f, n, tv.tv_sec, (long)tv.tv_usec);
  CHECK(got.len == want.len && memcmp(got.data, want.data, got.len) == 0,
        "json=%d journal=%d at %lld.%06ld:\n  want %s  got  %.*s", json, journal,
        (long long)tv.tv_sec, (long)tv.tv_usec, want.data, (int)got.len, got.data);
  sb_log_line_free(&got);
  free(want.data);
}

/* Lines of random fields; times random, then the seconds one after another and back. */
static void check_lines(void) {
  static const char *levels[] = {"debug", "info", "warn", "error", "trace", ""};
  enum { MAX_FIELDS = 40, TEXT = 200 };
  static char keys[MAX_FIELDS][TEXT], values[MAX_FIELDS][TEXT], event[TEXT];
  sb_log_field f[MAX_FIELDS];
  struct timeval tv = rnd_time();
  for (int round = 0; round < 20000; round++) {
    size_t n = rnd_below(round % 100 == 0 ? MAX_FIELDS : 8);
    for (size_t i = 0; i < n; i++) {
      rnd_text(keys[i], TEXT);
      rnd_text(values[i], round % 50 == 0 ? TEXT : 40);
      f[i] = (sb_log_field){keys[i], values[i], rnd_below(3) == 0};
    }
    rnd_text(event, 40);
    switch (round % 4) {
    case 0: tv = rnd_time(); break;
    case 1: tv.tv_usec = (long)rnd_below(1000000); break;
    case 2: tv.tv_sec += 1; break;                      /* the next second */
    case 3: tv.tv_sec -= (time_t)rnd_below(3); break; /* a clock stepped back */
    }
    const char *level = levels[rnd_below(sizeof levels / sizeof levels[0])];
    compare_line(round & 1, (round >> 1) & 1, level, event, f, n, tv);
  }
  /* the last second of a year, then the first of the next */
  struct timeval edge = {.tv_sec = 1798761599, .tv_usec = 999999};
  sb_log_field one = {"k", "v", false};
  compare_line(false, false, "info", "e", &one, 1, edge);
  edge.tv_sec++;
  edge.tv_usec = 0;
  compare_line(true, false, "info", "e", &one, 1, edge);
}

static void check_integers(void) {
  long long cases[] = {0, 1, -1, 9, 10, -10, 99, 100, 1000000007, INT_MAX, INT_MIN,
                       LLONG_MAX, LLONG_MIN, LLONG_MIN + 1, LLONG_MAX - 1};
  char got[24], want[48];
  for (size_t i = 0; i < sizeof cases / sizeof cases[0] + 20000; i++) {
    long long v = i < sizeof cases / sizeof cases[0] ? cases[i]
                                                     : (long long)(rnd() >> rnd_below(64));
    if (i % 2)
      v = -v;
    size_t len = sb_log_int_text(got, v);
    snprintf(want, sizeof want, LUA_INTEGER_FMT, (LUAI_UACINT)v);
    CHECK(strcmp(got, want) == 0 && len == strlen(want), "%s: got %s", want, got);
  }
}

static void compare_float(double v) {
  char got[48], want[48];
  sb_log_float_text(got, sizeof got, v);
  old_float_text(want, sizeof want, v);
  CHECK(strcmp(got, want) == 0, "%.17g: want %s got %s", v, want, got);
}

static void check_floats(void) {
  double cases[] = {0.0, -0.0, 0.1, 0.5, 1.0, 3.0, 12.5, 0.30000000000000004, 1e-5, 1e-300,
                    5e-324, 123456789012.3, 999999999999.9, 1e12, 1e12 + 0.5, 1e13, 1e14,
                    1e15, 1e100, 1.7976931348623157e308, -1.5, -3.0, -1e12, 0.05, 2.675,
                    1.25, 99999999999.95, NAN, -NAN, INFINITY, -INFINITY, 1.0 / 3};
  for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++)
    compare_float(cases[i]);
  for (int i = 0; i < 200000; i++) {
    /* a duration the lane writes (tenths of ms, rounded as tally() does), any tenths, and
     * any double at all */
    double ms = (double)(rnd() % 100000000000000ULL) / (double)(1 + rnd_below(100000));
    compare_float(floor(ms * 10 + 0.5) / 10);
    compare_float((double)(long long)(rnd() % 20000000000000ULL) / 10);
    uint64_t bits = rnd();
    double any;
    memcpy(&any, &bits, sizeof any);
    compare_float(any);
  }
}

static void check_timestamps(void) {
  for (int i = 0; i < 100000; i++) {
    struct timeval tv = rnd_time();
    if (i % 3 == 1)
      tv.tv_sec = 1798761599 + (time_t)rnd_below(3); /* around a new year */
    strbuf want = {0};
    old_put_timestamp(&want, tv);
    char got[48];
    size_t len = sb_log_timestamp_text(got, tv.tv_sec, (long)tv.tv_usec);
    CHECK(len == want.len && memcmp(got, want.data, len) == 0, "want %s got %.*s", want.data,
          (int)len, got);
    free(want.data);
  }
}

/* sb_log_write itself, to a file on fd 2: each line must be the old formatter's, scrubbed, at
 * one of the milliseconds between the clock read before and after it. */
static void check_written(void) {
  const char *secrets[] = {"s3cr3t-token", "xoxb-123456", "redact"};
  for (size_t i = 0; i < 3; i++)
    sb_log_redact(secrets[i]);
  char path[] = "/tmp/test_log_line.XXXXXX";
  int fd = mkstemp(path);
  CHECK(fd >= 0, "mkstemp");
  if (fd < 0)
    return;
  unlink(path);
  int saved_stderr = dup(2);
  enum { LINES = 3000, TEXT = 120 };
  static char values[LINES][TEXT];
  static struct timeval before[LINES], after[LINES];
  for (int i = 0; i < LINES; i++) {
    rnd_text(values[i], TEXT - 30);
    if (i % 3 == 0)
      strcat(values[i], i % 2 ? "s3cr3t-token" : "axoxb-123456xoxb-123456");
  }
  dup2(fd, 2);
  for (int i = 0; i < LINES; i++) {
    sb_log_set_json(i % 2 == 0);
    sb_log_field f[] = {{"value", values[i], false}, {"n", "42", true}};
    gettimeofday(&before[i], NULL);
    sb_log_write(i % 5 == 0 ? "warn" : "info", "test.line", f, 2);
    gettimeofday(&after[i], NULL);
  }
  dup2(saved_stderr, 2);
  close(saved_stderr);
  sb_log_set_json(false);
  off_t size = lseek(fd, 0, SEEK_END);
  char *all = malloc((size_t)size + 1);
  CHECK(all != NULL && pread(fd, all, (size_t)size, 0) == size, "read back");
  close(fd);
  if (all == NULL)
    return;
  all[size] = '\0';
  const char *at = all;
  for (int i = 0; i < LINES && failures == 0; i++) {
    const char *nl = strchr(at, '\n');
    CHECK(nl != NULL, "line %d missing", i);
    if (nl == NULL)
      break;
    size_t len = (size_t)(nl + 1 - at);
    bool matched = false;
    long long from_ms = before[i].tv_sec * 1000LL + before[i].tv_usec / 1000;
    long long to_ms = after[i].tv_sec * 1000LL + after[i].tv_usec / 1000;
    for (long long ms = from_ms; ms <= to_ms && !matched; ms++) {
      struct timeval tv = {.tv_sec = (time_t)(ms / 1000), .tv_usec = (long)(ms % 1000) * 1000};
      sb_log_field f[] = {{"value", values[i], false}, {"n", "42", true}};
      strbuf want = {0};
      old_format(&want, i % 2 == 0, false, i % 5 == 0 ? "warn" : "info", "test.line", f, 2, tv);
      old_scrub(&want, secrets, 3);
      matched = want.len == len && memcmp(want.data, at, len) == 0;
      if (!matched && ms == to_ms)
        fprintf(stderr, "line %d:\n  want %s  got  %.*s", i, want.data, (int)len, at);
      free(want.data);
    }
    CHECK(matched, "line %d differs", i);
    at = nl + 1;
  }
  CHECK(failures != 0 || *at == '\0', "more lines than written");
  free(all);
}

int main(void) {
  check_integers();
  check_floats();
  check_timestamps();
  check_lines();
  check_written();
  if (failures) {
    fprintf(stderr, "%d check(s) failed\n", failures);
    return 1;
  }
  printf("ok\n");
  return 0;
}
