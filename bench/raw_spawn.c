/* Reference for the per-exec overhead benchmark: N sequential `bash -c true` with
 * posix_spawn + waitpid, stdin from /dev/null and stdout/stderr on pipes that are drained,
 * like the engine does. Prints one line per round: the mean microseconds per exec. */
#include "reference_spawn.h"

#include <stdio.h>
#include <stdlib.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

static double now_us(void) {
  struct timespec ts;
  clock_gettime(CLOCK_MONOTONIC, &ts);
  return ts.tv_sec * 1e6 + ts.tv_nsec / 1e3;
}

static int run_once(void) {
  pid_t pid;
  int out, err;
  if (spawn_true(&pid, &out, &err) != 0)
    return -1;
  char buf[4096];
  while (read(out, buf, sizeof buf) > 0) {
  }
  while (read(err, buf, sizeof buf) > 0) {
  }
  close(out);
  close(err);
  int status;
  waitpid(pid, &status, 0);
  return 0;
}

int main(int argc, char **argv) {
  int n = argc > 1 ? atoi(argv[1]) : 200;
  int rounds = argc > 2 ? atoi(argv[2]) : 5;
  for (int r = 0; r < rounds; r++) {
    double t0 = now_us();
    for (int i = 0; i < n; i++)
      if (run_once() != 0) {
        perror("posix_spawn");
        return 1;
      }
    printf("%.1f\n", (now_us() - t0) / n);
  }
  return 0;
}
