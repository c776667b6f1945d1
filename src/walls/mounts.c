/* The workspace's way into the instance, made in the holder's own mount namespace before bwrap
 * starts: the workspace's own file system mounted over its directory (mount_disk,
 * src/walls/disk.c), and a way the instance's uid can walk to a directory it must see
 * (stage_reachable), since bwrap resolves its binds' sources by path as that uid. */
#include <errno.h>
#include <fcntl.h>
#include <limits.h>
#include <sched.h>
#include <stdbool.h>
#include <stdio.h>
#include <string.h>
#include <sys/mount.h>
#include <sys/stat.h>
#include <unistd.h>

#include "walls/disk.h"
#include "walls/walls.h"

/* bwrap resolves a --bind-fd/--ro-bind-fd source by its path (the target of /proc/self/fd/N)
 * as the instance's uid, so every directory above it must be searchable by that uid: a --root
 * under /root (0700) is not. Returns the first directory above `path` the uid cannot search
 * (copied into `blocked`, its stat in `*st`), or false when the way is open. */
static bool way_blocked(const options *o, const char *path, char *blocked, size_t size, struct stat *st) {
  char p[PATH_MAX];
  snprintf(p, sizeof p, "%s", path);
  for (char *end = p; (end = strchr(end, '/')) != NULL; end++) {
    char keep = end[1];
    end[1] = '\0'; /* p is now one directory above the path, with its slash */
    bool last = keep == '\0';
    if (!last && stat(p, st) == 0) {
      mode_t bit = st->st_uid == (uid_t)o->uid ? S_IXUSR : st->st_gid == (gid_t)o->gid ? S_IXGRP : S_IXOTH;
      if ((st->st_mode & bit) == 0) {
        if (end > p)
          *end = '\0'; /* "/root", not "/root/" */
        snprintf(blocked, size, "%s", p);
        return true;
      }
    }
    end[1] = keep;
  }
  return false;
}

/* A mount namespace of this helper's own, made once (unshare needs CAP_SYS_ADMIN, which a
 * container's root may lack): the host's mounts still propagate in (a slave), ours never out.
 * bwrap and the instance inherit it, so what is mounted here exists only for the instance and
 * goes with its last process. Returns 0 or -1 with errno. */
static int private_mounts(void) {
  static bool done;
  if (done)
    return 0;
  if (unshare(CLONE_NEWNS) < 0 || mount(NULL, "/", NULL, MS_REC | MS_SLAVE, NULL) < 0)
    return -1;
  done = true;
  return 0;
}

/* The workspace's own file system (src/walls/disk.c) mounted over the workspace directory, open
 * as `ws`, in this helper's mount namespace; returns the mounted file system's root, open
 * (close-on-exec), and closes `ws`; the loop device's number in *loop. */
int mount_disk(const options *o, int ws, int *loop) {
  char why[PATH_MAX + 256];
  struct stat below, top;
  if (o->disk_bytes < 1024 * 1024 || strchr(o->disk_image, '/') != NULL || o->disk_image[0] == '\0') {
    errno = 0;
    die("--disk-image takes a file name in the workspace and --disk-bytes at least 1 MiB");
  }
  int record = -1;
  if (o->loop_record != NULL &&
      (record = open(o->loop_record, O_RDONLY | O_DIRECTORY | O_NOFOLLOW | O_CLOEXEC)) < 0)
    die("cannot open --loop-record %s", o->loop_record);
  if (private_mounts() < 0)
    die("the workspace's own file system needs a mount namespace of the helper's own");
  *loop = walls_disk_mount(ws, o->workspace, o->disk_image, o->disk_bytes, o->disk_reserve,
                           (int)(o->nice > 0 ? o->nice : 0), record, why, sizeof why);
  if (record >= 0)
    close(record);
  if (*loop < 0) {
    errno = 0;
    die("the workspace's own file system (%lld bytes, policies/isolation.lua workspace_max_bytes) "
        "could not be made: %s", o->disk_bytes, why);
  }
  /* by its path again: the walk crosses into the mount (the old fd names the directory below) */
  int fs = open(o->workspace, O_RDONLY | O_DIRECTORY | O_NOFOLLOW | O_CLOEXEC);
  if (fs < 0 || fstat(fs, &top) < 0 || fstat(ws, &below) < 0 || top.st_dev == below.st_dev)
    die("the workspace's own file system is not at %s after mounting it", o->workspace);
  close(ws);
  /* the instance finds an empty /workspace, as before (`git clone URL .` needs one): mkfs's
   * lost+found goes (e2fsck makes it again if it ever needs it), and the mode is the host
   * directory's. A remount (after the instance before died) finds the root its uid's: chmod
   * needs the owner or CAP_FOWNER, which the units do not give, so the root is ours again
   * first (CAP_CHOWN, as the fchown after this) */
  (void)unlinkat(fs, "lost+found", AT_REMOVEDIR);
  if (fchown(fs, geteuid(), getegid()) < 0 || fchmod(fs, 0700) < 0)
    die("chmod the workspace's own file system");
  return fs;
}

/* A directory (open as `fd`) whose way is blocked is bind-mounted, in a mount namespace of this
 * helper's own (made on the first such directory: unshare needs CAP_SYS_ADMIN, which a
 * container's root may lack), below a fresh tmpfs over the spawner socket's directory (its
 * socket is bound already; the host's view is unchanged), whose way is /tmp's. Returns the
 * staged copy's fd (close-on-exec, at 10 or above); `fd` is closed. Where it cannot, dies
 * naming the directory in the way and its mode. */
int stage_reachable(const options *o, int fd, const char *path, int k) {
  static bool staged;
  char blocked[PATH_MAX], dir[PATH_MAX], src[32];
  struct stat st;
  if (!way_blocked(o, path, blocked, sizeof blocked, &st))
    return fd;
  const char *slash = o->socket ? strrchr(o->socket, '/') : NULL;
  int len = slash ? (int)(slash - o->socket) : 0;
  if (!staged && (len == 0 || private_mounts() < 0 ||
                  (snprintf(dir, sizeof dir, "%.*s", len, o->socket),
                   mount("tmpfs", dir, "tmpfs", MS_NOSUID | MS_NODEV | MS_NOEXEC, "mode=0711,size=64k") < 0))) {
    errno = 0;
    die("the instance's uid %ld cannot reach %s: %s is mode %04o (owner uid %d), and bubblewrap "
        "resolves the path as that uid (a mount namespace to bypass it needs CAP_SYS_ADMIN). Make "
        "it searchable (chmod o+x %s) or choose a --root whose parents are (docs/isolation.md)",
        o->uid, path, blocked, (unsigned)(st.st_mode & 07777), (int)st.st_uid, blocked);
  }
  staged = true;
  /* A bind mount's source must be in this namespace: the directory again, here, and the same
   * one (a path swapped meanwhile is refused). */
  int here = open(path, O_RDONLY | O_DIRECTORY | O_NOFOLLOW | O_CLOEXEC);
  struct stat was, now;
  if (here < 0 || fstat(fd, &was) < 0 || fstat(here, &now) < 0 || was.st_dev != now.st_dev ||
      was.st_ino != now.st_ino)
    die("%s changed while the instance was being made", path);
  snprintf(dir, sizeof dir, "%.*s/%d", len, o->socket, k);
  snprintf(src, sizeof src, "/proc/self/fd/%d", here);
  if (mkdir(dir, 0711) < 0 || mount(src, dir, NULL, MS_BIND, NULL) < 0)
    die("cannot stage %s at %s for the instance's uid", path, dir);
  close(here);
  int again = open(dir, O_RDONLY | O_DIRECTORY | O_NOFOLLOW | O_CLOEXEC);
  int moved = again < 0 ? -1 : fcntl(again, F_DUPFD_CLOEXEC, 10);
  if (moved < 0)
    die("cannot open the staged %s", dir);
  close(again);
  close(fd);
  return moved;
}
