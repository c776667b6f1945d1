/* Reference for the per-exec overhead benchmark: N sequential `bash -c true` with
 * posix_spawn + waitpid, stdin from /dev/null and stdout/stderr on pipes that are drained,
 * like the engine does. Prints one line per round: the mean microseconds per exec. */
#include <fcntl.h>
#include <spawn.h>
#include <stdio.h>
#include <stdlib.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

extern char **environ;

static double now_us(void) {
  struct timespec ts;
  clock_gettime(CLOCK_MONOTONIC, &ts);
  return ts.tv_sec * 1e6 + ts.tv_nsec / 1e3;
}

static int run_once(void) {
  int out[2], err[2];
  if (pipe2(out, O_CLOEXEC) || pipe2(err, O_CLOEXEC))
    return -1;
  posix_spawn_file_actions_t fa;
  posix_spawn_file_actions_init(&fa);
  posix_spawn_file_actions_addopen(&fa, 0, "/dev/null", O_RDONLY, 0);
  posix_spawn_file_actions_adddup2(&fa, out[1], 1);
  posix_spawn_file_actions_adddup2(&fa, err[1], 2);
  posix_spawnattr_t attr;
  posix_spawnattr_init(&attr);
  posix_spawnattr_setflags(&attr, POSIX_SPAWN_SETSID);
  char *argv[] = {"bash", "-c", "true", NULL};
  char *envp[] = {"PATH=/usr/local/bin:/usr/bin:/bin", NULL};
  pid_t pid;
  int rc = posix_spawn(&pid, "/bin/bash", &fa, &attr, argv, envp);
  close(out[1]);
  close(err[1]);
  char buf[4096];
  while (read(out[0], buf, sizeof buf) > 0) {
  }
  while (read(err[0], buf, sizeof buf) > 0) {
  }
  close(out[0]);
  close(err[0]);
  posix_spawn_file_actions_destroy(&fa);
  posix_spawnattr_destroy(&attr);
  if (rc != 0)
    return -1;
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
