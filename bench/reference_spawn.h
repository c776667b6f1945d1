/* The reference spawn both C benchmarks measure against: `bash -c true` with posix_spawn in
 * its own session, stdin /dev/null and stdout/stderr on pipes — the work the engine does per
 * command, without the engine. Returns 0 and the read ends of both pipes, or -1. */
#ifndef SB_BENCH_REFERENCE_SPAWN_H
#define SB_BENCH_REFERENCE_SPAWN_H

#include <fcntl.h>
#include <spawn.h>
#include <unistd.h>

static int spawn_true(pid_t *pid, int *out_fd, int *err_fd) {
  int out[2], err[2];
  if (pipe2(out, O_CLOEXEC) != 0)
    return -1;
  if (pipe2(err, O_CLOEXEC) != 0) {
    close(out[0]);
    close(out[1]);
    return -1;
  }
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
  int rc = posix_spawn(pid, "/bin/bash", &fa, &attr, argv, envp);
  posix_spawn_file_actions_destroy(&fa);
  posix_spawnattr_destroy(&attr);
  close(out[1]);
  close(err[1]);
  *out_fd = out[0];
  *err_fd = err[0];
  if (rc != 0) {
    close(out[0]);
    close(err[0]);
    return -1;
  }
  return 0;
}

#endif
