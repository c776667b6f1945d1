/* Reference for the sandboxd throughput benchmark: the raw limit of this machine for running
 * `bash -c true` with C children kept going at once (default 8), each spawned with posix_spawn
 * (own session, stdin /dev/null, stdout/stderr on drained pipes — what the engine does per
 * command), reaped with waitpid. Runs for SECONDS and prints one line: the commands per second.
 *
 *   bench_sandbox_raw8 [CONCURRENCY [SECONDS]] */
#include "reference_spawn.h"

#include <errno.h>
#include <poll.h>
#include <stdio.h>
#include <stdlib.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

enum { MAX_SLOTS = 256 };

typedef struct {
  pid_t pid; /* 0: free */
  int out, err; /* read ends, -1 once at EOF */
} slot;

static double now_s(void) {
  struct timespec ts;
  clock_gettime(CLOCK_MONOTONIC, &ts);
  return ts.tv_sec + ts.tv_nsec / 1e9;
}

static int start(slot *s) { return spawn_true(&s->pid, &s->out, &s->err); }

int main(int argc, char **argv) {
  int n = argc > 1 ? atoi(argv[1]) : 8;
  double seconds = argc > 2 ? atof(argv[2]) : 5.0;
  if (n < 1 || n > MAX_SLOTS)
    return 2;
  slot slots[MAX_SLOTS] = {0};
  struct pollfd pfd[2 * MAX_SLOTS];
  long done = 0;
  double t0 = now_s(), end = t0 + seconds;
  for (int i = 0; i < n; i++)
    if (start(&slots[i]) != 0)
      return 1;
  while (now_s() < end) {
    int m = 0;
    for (int i = 0; i < n; i++) {
      pfd[m++] = (struct pollfd){.fd = slots[i].out, .events = POLLIN};
      pfd[m++] = (struct pollfd){.fd = slots[i].err, .events = POLLIN};
    }
    if (poll(pfd, m, 1000) < 0 && errno != EINTR)
      return 1;
    for (int i = 0; i < n; i++) {
      char buf[4096];
      for (int k = 0; k < 2; k++) {
        int *fd = k == 0 ? &slots[i].out : &slots[i].err;
        if (*fd >= 0 && (pfd[2 * i + k].revents & (POLLIN | POLLHUP))) {
          if (read(*fd, buf, sizeof buf) <= 0) {
            close(*fd);
            *fd = -1;
          }
        }
      }
      if (slots[i].out < 0 && slots[i].err < 0) {
        int status;
        waitpid(slots[i].pid, &status, 0);
        done++;
        if (start(&slots[i]) != 0)
          return 1;
      }
    }
  }
  printf("%.1f\n", done / (now_s() - t0));
  return 0;
}
