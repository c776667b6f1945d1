/* Entering an existing instance: its namespaces found through a pidfd (namespaces_of), joined
 * by the spawner once (enter_instance), or per command by the `enter` mode (the first design,
 * kept for diagnosis). */
#include <errno.h>
#include <sched.h>
#include <signal.h>
#include <stdio.h>
#include <string.h>
#include <sys/prctl.h>
#include <sys/resource.h>
#include <sys/syscall.h>
#include <sys/wait.h>
#include <unistd.h>

#include "walls/walls.h"

/* Namespaces of `pid` that differ from ours: the ones to enter. */
int namespaces_of(long pid) {
  static const struct { const char *name; int flag; } kinds[] = {
      {"user", CLONE_NEWUSER}, {"mnt", CLONE_NEWNS}, {"pid", CLONE_NEWPID},
      {"ipc", CLONE_NEWIPC},   {"uts", CLONE_NEWUTS}, {"net", CLONE_NEWNET},
  };
  int flags = 0;
  for (size_t i = 0; i < sizeof kinds / sizeof kinds[0]; i++) {
    char theirs[64], mine[64], a[64], b[64];
    snprintf(theirs, sizeof theirs, "/proc/%ld/ns/%s", pid, kinds[i].name);
    snprintf(mine, sizeof mine, "/proc/self/ns/%s", kinds[i].name);
    ssize_t na = readlink(theirs, a, sizeof a - 1), nb = readlink(mine, b, sizeof b - 1);
    if (na < 0 || nb < 0)
      die("cannot read %s", na < 0 ? theirs : mine);
    a[na] = b[nb] = '\0';
    if (strcmp(a, b) != 0)
      flags |= kinds[i].flag;
  }
  return flags;
}

/* The holder joins the instance's namespaces (as enter did per command): its children are
 * born inside the PID namespace, and it is already in the instance's cgroups, so a command
 * migrates nothing. Not dumpable: a command (same uid, no capability) cannot ptrace it. */
void enter_instance(long pid, pid_t parent) {
  int pidfd = (int)syscall(SYS_pidfd_open, (pid_t)pid, 0);
  if (pidfd < 0)
    die("the instance's init (pid %ld) is gone", pid);
  int flags = namespaces_of(pid);
  if (setns(pidfd, flags) < 0)
    die("setns into the instance (pid %ld)", pid);
  close(pidfd);
  if (prctl(PR_SET_DUMPABLE, 0) < 0)
    die("prctl(PR_SET_DUMPABLE)");
  die_with_parent(parent); /* the credential change of setns cleared it */
}

int enter(const options *o) {
  pid_t parent = getppid();
  if (o->pid <= 0 || o->command == NULL || o->command[0] == NULL) {
    errno = 0;
    die("enter needs --pid and -- PROGRAM");
  }
  /* Taken while we still see the host's /proc; the pidfd pins the exact process, so a pid
   * reused after the instance died is refused below rather than entered. */
  int pidfd = (int)syscall(SYS_pidfd_open, (pid_t)o->pid, 0);
  if (pidfd < 0)
    die("the instance's init (pid %ld) is gone", o->pid);
  int flags = namespaces_of(o->pid);
  if (!(flags & CLONE_NEWUSER) || !(flags & CLONE_NEWPID)) {
    errno = 0;
    die("pid %ld is not an instance (it shares our user or PID namespace)", o->pid);
  }
  join_cgroups(o, false);
  set_limit(RLIMIT_NOFILE, o->nofile, "nofile");
  set_limit(RLIMIT_FSIZE, o->fsize, "fsize");
  drop_to(o);
  die_with_parent(parent);
  /* As the namespaces' owner uid we hold every capability inside them, which setns needs. */
  if (setns(pidfd, flags) < 0)
    die("setns into the instance (pid %ld)", o->pid);
  close(pidfd);
  /* The deadline's TERM goes to our whole process group: the command gets it and ends; we
   * stay to report its status. (A KILL ends us, and PR_SET_PDEATHSIG ends the command.) */
  signal(SIGTERM, SIG_IGN);
  signal(SIGINT, SIG_IGN);
  signal(SIGHUP, SIG_IGN);
  pid_t me = getpid();
  pid_t pid = fork(); /* the first child after setns(CLONE_NEWPID) is inside the namespace */
  if (pid < 0)
    die("fork into the instance");
  if (pid == 0) {
    signal(SIGTERM, SIG_DFL);
    signal(SIGINT, SIG_DFL);
    signal(SIGHUP, SIG_DFL);
    if (prctl(PR_SET_PDEATHSIG, SIGKILL) < 0)
      die("prctl(PR_SET_PDEATHSIG)");
    (void)me; /* getppid() is 0 here: our parent is outside the PID namespace */
    if (chdir(o->cwd) < 0)
      die("chdir %s", o->cwd);
    drop_capabilities();
    execvp(o->command[0], o->command);
    fprintf(stderr, "walls: cannot run %s: %s\n", o->command[0], strerror(errno));
    _exit(errno == ENOENT ? 127 : 126);
  }
  int status;
  while (waitpid(pid, &status, 0) < 0)
    if (errno != EINTR)
      die("waitpid");
  return mirror_status(status);
}
