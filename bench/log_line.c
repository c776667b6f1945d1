/* The engine's log line, per line (bench/README.md "Session 8: the log line without stdio"):
 * sandboxd's request line (`sandboxd.request duration_ms=… lane=1 method=POST remote=… route=/exec
 * status=200 thread=…`, one registered secret, text and JSON) made and written N times by
 *   before — the printf/strftime formatter it replaced (tests/c/log_line_reference.h), its float
 *            and integer texts by snprintf, fwrite + fflush on stderr;
 *   after  — sb_log_write as it is (src/log/log_line.c), sb_log_float_text, sb_log_int_text;
 *   write  — write(2) alone of the same bytes (one line made once): the floor.
 * stderr is /dev/null (where it points is the caller's: `2>/dev/null`), so the write is the
 * system call's cost, not a disk's. The three take turns ROUNDS times; the figure is the thread's
 * CPU time (CLOCK_THREAD_CPUTIME_ID) per line, whose median of the rounds is printed with each
 * one's ratio to the write alone.
 *
 *   build/bench/bench_log_line [N=20000] [ROUNDS=9] 2>/dev/null */
#include "../tests/c/log_line_reference.h"
#include "log/log.h"
#include "log/log_lua.h"

#include <lua.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

static double thread_cpu_ns(void) {
  struct timespec t;
  clock_gettime(CLOCK_THREAD_CPUTIME_ID, &t);
  return (double)t.tv_sec * 1e9 + (double)t.tv_nsec;
}

static const char *const SECRET[] = {"bench-bearer-0123456789"};

static double duration_of(int i) { return floor((1.0 + (i % 977) * 0.37) * 10 + 0.5) / 10; }

static void line_before(int i, bool json) {
  char dur[48], status[48];
  snprintf(dur, sizeof dur, LUA_NUMBER_FMT, (LUAI_UACNUMBER)duration_of(i));
  if (dur[strspn(dur, "-0123456789")] == '\0')
    strncat(dur, ".0", sizeof dur - strlen(dur) - 1);
  snprintf(status, sizeof status, LUA_INTEGER_FMT, (LUAI_UACINT)200);
  sb_log_field f[] = {{"duration_ms", dur, true},         {"lane", "1", true},
                      {"method", "POST", false},          {"remote", "127.0.0.1:41234", false},
                      {"route", "/exec", false},          {"status", status, true},
                      {"thread", "bench-thread-7", false}};
  struct timeval tv;
  gettimeofday(&tv, NULL);
  strbuf b = {0};
  old_format(&b, json, false, "info", "sandboxd.request", f, 7, tv);
  /* the old scrub's first step: a line with no secret in it is left as it is */
  if (strstr(b.data, SECRET[0]) != NULL)
    abort();
  fwrite(b.data, 1, b.len, stderr);
  fflush(stderr);
  free(b.data);
}

static void line_after(int i, bool json) {
  (void)json; /* sb_log_set_json was called for the round */
  char dur[48], status[24];
  sb_log_float_text(dur, sizeof dur, duration_of(i));
  sb_log_int_text(status, 200);
  sb_log_field f[] = {{"duration_ms", dur, true},         {"lane", "1", true},
                      {"method", "POST", false},          {"remote", "127.0.0.1:41234", false},
                      {"route", "/exec", false},          {"status", status, true},
                      {"thread", "bench-thread-7", false}};
  sb_log_write("info", "sandboxd.request", f, 7);
}

static int cmp_double(const void *a, const void *b) {
  double x = *(const double *)a, y = *(const double *)b;
  return (x > y) - (x < y);
}

int main(int argc, char **argv) {
  int n = argc > 1 ? atoi(argv[1]) : 20000, rounds = argc > 2 ? atoi(argv[2]) : 9;
  if (n <= 0 || rounds <= 0 || rounds > 99)
    return 2;
  sb_log_redact(SECRET[0]);
  for (int json = 0; json <= 1; json++) {
    sb_log_set_json(json);
    char text[512];
    int len = snprintf(text, sizeof text,
                       json ? "{\"ts\":\"2026-12-06T22:40:00.123Z\",\"level\":\"info\",\"event\":"
                              "\"sandboxd.request\",\"duration_ms\":12.3,\"lane\":1,\"method\":"
                              "\"POST\",\"remote\":\"127.0.0.1:41234\",\"route\":\"/exec\","
                              "\"status\":200,\"thread\":\"bench-thread-7\"}\n"
                            : "2026-12-06T22:40:00.123Z info sandboxd.request duration_ms=12.3 "
                              "lane=1 method=POST remote=127.0.0.1:41234 route=/exec "
                              "status=200 thread=bench-thread-7\n");
    double before[99], after[99], floor_ns[99];
    for (int r = 0; r < rounds; r++) {
      double t0 = thread_cpu_ns();
      for (int i = 0; i < n; i++)
        line_before(i, json);
      double t1 = thread_cpu_ns();
      for (int i = 0; i < n; i++)
        line_after(i, json);
      double t2 = thread_cpu_ns();
      for (int i = 0; i < n; i++)
        if (write(STDERR_FILENO, text, (size_t)len) != len)
          return 1;
      double t3 = thread_cpu_ns();
      before[r] = (t1 - t0) / n;
      after[r] = (t2 - t1) / n;
      floor_ns[r] = (t3 - t2) / n;
    }
    qsort(before, (size_t)rounds, sizeof(double), cmp_double);
    qsort(after, (size_t)rounds, sizeof(double), cmp_double);
    qsort(floor_ns, (size_t)rounds, sizeof(double), cmp_double);
    double b = before[rounds / 2], a = after[rounds / 2], w = floor_ns[rounds / 2];
    printf("{\"format\":\"%s\",\"lines\":%d,\"rounds\":%d,\"before_ns\":%.0f,\"after_ns\":%.0f,"
           "\"write_ns\":%.0f,\"before_over_write\":%.2f,\"after_over_write\":%.2f}\n",
           json ? "json" : "text", n, rounds, b, a, w, b / w, a / w);
  }
  return 0;
}
