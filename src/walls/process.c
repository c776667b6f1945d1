/* What each of the helper's processes becomes before it does the instance's work — the
 * instance's uid, no capability, no_new_privs, the rlimits, an end tied to its parent's — and
 * how it tells its own end: a command's wait status mirrored as ours, so the supervisor sees
 * what it would have seen from the command itself. */
#include <errno.h>
#include <fcntl.h>
#include <grp.h>
#include <linux/capability.h>
#include <signal.h>
#include <stdbool.h>
#include <string.h>
#include <sys/prctl.h>
#include <sys/resource.h>
#include <sys/syscall.h>
#include <sys/wait.h>
#include <unistd.h>

#include "walls/walls.h"

/* Becomes the instance's host uid/gid for good (real, effective, saved; no supplementary
 * groups). Afterwards this process has no capability in the host's user namespace. */
void drop_to(const options *o) {
  if (o->uid < 0 || o->gid < 0 || o->uid == 0) {
    errno = 0;
    die("--uid (not 0) and --gid are required");
  }
  if (setgroups(0, NULL) < 0)
    die("setgroups");
  if (setresgid((gid_t)o->gid, (gid_t)o->gid, (gid_t)o->gid) < 0)
    die("setresgid %ld", o->gid);
  if (setresuid((uid_t)o->uid, (uid_t)o->uid, (uid_t)o->uid) < 0)
    die("setresuid %ld", o->uid);
}

/* Dies with the parent (the signal is cleared by credential changes, so this comes after
 * drop_to); if the parent is already gone, dies now. */
void die_with_parent(pid_t parent) {
  if (prctl(PR_SET_PDEATHSIG, SIGKILL) < 0)
    die("prctl(PR_SET_PDEATHSIG)");
  if (getppid() != parent)
    _exit(EXIT_WALLS);
}

/* Lowers a limit to `value`; never raises one (a server started under a lower hard limit
 * keeps it for its instances). */
void set_limit(int resource, long long value, const char *name) {
  struct rlimit rl;
  if (limit_for(resource, value, &rl) && setrlimit(resource, &rl) < 0)
    die("setrlimit %s %llu", name, (unsigned long long)rl.rlim_max);
}

/* The limit set_limit sets for `value` (clamped to our hard limit) in *out; false when there is
 * none to set (value < 0). */
bool limit_for(int resource, long long value, struct rlimit *out) {
  if (value < 0)
    return false;
  struct rlimit cur;
  if (getrlimit(resource, &cur) == 0 && cur.rlim_max != RLIM_INFINITY && (rlim_t)value > cur.rlim_max)
    value = (long long)cur.rlim_max;
  *out = (struct rlimit){(rlim_t)value, (rlim_t)value};
  return true;
}


/* Every capability gone, for good (no_new_privs: no setuid binary gives one back). */
void drop_capabilities(void) {
  struct __user_cap_header_struct h = {_LINUX_CAPABILITY_VERSION_3, 0};
  struct __user_cap_data_struct d[2];
  memset(d, 0, sizeof d);
  if (syscall(SYS_capset, &h, d) < 0)
    die("capset");
  if (prctl(PR_SET_NO_NEW_PRIVS, 1, 0, 0, 0) < 0)
    die("prctl(PR_SET_NO_NEW_PRIVS)");
}

/* Points fd 1 at /dev/null. The holder's stdout is a pipe sandboxd reads for "ready <pid>" and
 * for nothing after: the holder's children (bwrap and its init, the network launcher and pasta)
 * get /dev/null instead of it, and the holder lets it go once it said ready, so the pipe ends
 * and sandboxd closes its end — a descriptor less per awake instance in its budget
 * (sandboxd/descriptors.lua). stderr stays: bwrap's and pasta's words go there. */
void stdout_to_null(void) {
  int null = open("/dev/null", O_WRONLY | O_CLOEXEC);
  if (null < 0 || dup2(null, STDOUT_FILENO) < 0)
    die("cannot point stdout at /dev/null");
  if (null != STDOUT_FILENO)
    close(null);
}

/* Ends this process as `status` says the command ended: its exit code, or its signal raised
 * on ourselves (the code 128 + N only when the signal did not end us). */
int mirror_status(int status) {
  if (WIFEXITED(status))
    return WEXITSTATUS(status);
  int sig = WTERMSIG(status);
  signal(sig, SIG_DFL);
  kill(getpid(), sig);
  return 128 + sig;
}
