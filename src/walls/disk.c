/* A workspace's own file system: see disk.h. Used by the holder (mounts.c, mount_disk) while it is
 * still root, in its private mount namespace, before bwrap binds the workspace. */
#ifndef _GNU_SOURCE
#define _GNU_SOURCE
#endif
#include "walls/disk.h"

#include <errno.h>
#include <stdbool.h>
#include <fcntl.h>
#include <limits.h>
#include <linux/loop.h>
#include <stdarg.h>
#include <stdio.h>
#include <string.h>
#include <sys/file.h>
#include <sys/ioctl.h>
#include <sys/mount.h>
#include <sys/resource.h>
#include <sys/stat.h>
#include <sys/statvfs.h>
#include <sys/sysmacros.h>
#include <sys/wait.h>
#include <unistd.h>

enum {
  LOOP_TRIES = 32,  /* another process may take the free loop device first: ask again */
  LOOP_MAJOR = 7,
};

/* Writes "what: strerror(err)" (err 0: just what) to why; returns -1. */
static int fail(char *why, size_t size, int err, const char *fmt, ...)
    __attribute__((format(printf, 4, 5)));
static int fail(char *why, size_t size, int err, const char *fmt, ...) {
  va_list ap;
  va_start(ap, fmt);
  int n = vsnprintf(why, size, fmt, ap);
  va_end(ap);
  if (err != 0 && n >= 0 && (size_t)n < size)
    snprintf(why + n, size - (size_t)n, ": %s", strerror(err));
  return -1;
}

/* mkfs.ext4 on the image open as img_fd: no journal (a crash of the instance or of the server
 * unmounts it cleanly, and sandboxd checks every kept image with e2fsck -p at start), no blocks
 * reserved for root (sandboxd's /write, as root, gets no more room than a command), inode
 * tables initialised lazily and nothing discarded (the image is fallocated: its unwritten
 * extents read as zeros, and a discard would punch out what was reserved).
 * Its output goes to our stderr: our stdout carries "ready". */
static int make_fs(int img_fd, int nice, char *why, size_t size) {
  char dev[32];
  snprintf(dev, sizeof dev, "/proc/self/fd/%d", img_fd);
  pid_t pid = fork();
  if (pid < 0)
    return fail(why, size, errno, "cannot fork mkfs.ext4");
  if (pid == 0) {
    if (fcntl(img_fd, F_SETFD, 0) < 0 || dup2(2, 1) < 0)
      _exit(126);
    if (nice > 0) /* a spare's, built in the background: it yields to running commands */
      (void)setpriority(PRIO_PROCESS, 0, nice > 19 ? 19 : nice);
    char *argv[] = {"mkfs.ext4", "-q", "-F", "-m", "0", "-O", "^has_journal",
                    "-E", "lazy_itable_init=1,nodiscard", "-L", "workspace", dev, NULL};
    execvp(argv[0], argv);
    execv("/usr/sbin/mkfs.ext4", argv); /* a PATH without the sbin directories */
    execv("/sbin/mkfs.ext4", argv);
    _exit(127);
  }
  int status;
  while (waitpid(pid, &status, 0) < 0)
    if (errno != EINTR)
      return fail(why, size, errno, "waitpid mkfs.ext4");
  if (WIFEXITED(status) && WEXITSTATUS(status) == 127)
    return fail(why, size, 0, "mkfs.ext4 is not installed (apt-get install e2fsprogs)");
  if (!WIFEXITED(status) || WEXITSTATUS(status) != 0)
    return fail(why, size, 0, "mkfs.ext4 failed (wait status %d; its message is above)", status);
  return 0;
}

/* The refusal a workspace that does not fit the host's disk gets, in words (the program
 * recognises its first words, shell/instance.lua): the amounts are the operator's. */
static int no_room(char *why, size_t size, long long need, long long avail, long long reserve) {
  return fail(why, size, 0,
              "the host's disk is full: this sandbox cannot grow; delete files or ask later (its "
              "workspace needs %lld MiB more of the host's disk, which has %lld MiB free and keeps "
              "%lld MiB in reserve: policies/isolation.lua workspace_max_bytes, disk_reserve_bytes)",
              need >> 20, avail >> 20, reserve >> 20);
}

/* Bytes free to us on the file system of fd (what a write there can still take), or -1. */
static long long free_bytes(int fd) {
  struct statvfs fs;
  if (fstatvfs(fd, &fs) < 0)
    return -1;
  return (long long)fs.f_bavail * (long long)fs.f_frsize;
}

/* Every byte of the image reserved on the host's disk (fallocate: unwritten extents, no data
 * written) while `reserve` bytes stay free beside it. A sparse image would take its blocks only
 * when the workspace's ext4 writes them back: on a full host that writeback fails after the
 * command was told its write succeeded (the kernel's "lost async page write"), and nothing can
 * save it then. Instances start at once: the check and the allocation are one step under a lock
 * on the server's root (the workspace's parent, `dir_fd`'s ".."), so two starts never both take
 * the same room; the check after catches what others on the host wrote meanwhile. `undo` (a new
 * image): a reservation that leaves the host short is given back by the caller removing it. */
static int reserve_image(int img, int dir_fd, long long bytes, long long reserve, bool undo,
                         char *why, size_t size) {
  int rc = -1;
  int root = openat(dir_fd, "..", O_RDONLY | O_DIRECTORY | O_CLOEXEC);
  if (root < 0) {
    fail(why, size, errno, "cannot open the workspaces' root");
    goto out;
  }
  while (flock(root, LOCK_EX) < 0) {
    if (errno != EINTR) {
      fail(why, size, errno, "cannot lock the workspaces' root");
      goto out;
    }
  }
  struct stat st;
  if (fstat(img, &st) < 0) {
    fail(why, size, errno, "cannot stat the workspace's image");
    goto out;
  }
  long long held = (long long)st.st_blocks * 512;
  long long need = bytes > held ? bytes - held : 0;
  long long avail = free_bytes(img);
  if (avail < 0) {
    fail(why, size, errno, "cannot read the host's free disk space (statvfs)");
    goto out;
  }
  if (need > 0 && avail - need < reserve) {
    no_room(why, size, need, avail, reserve);
    goto out;
  }
  if (need > 0 && fallocate(img, 0, 0, (off_t)bytes) < 0) {
    if (errno == ENOSPC || errno == EDQUOT)
      no_room(why, size, need, avail, reserve);
    else
      fail(why, size, errno, "cannot reserve the workspace's image on the host's disk (fallocate; "
           "a file system without it can only hold workspace_size = \"measured\")");
    goto out;
  }
  long long left = free_bytes(img);
  if (undo && need > 0 && left >= 0 && left < reserve) {
    no_room(why, size, need, left + need, reserve);
    goto out;
  }
  rc = 0;
out:
  if (root >= 0)
    close(root); /* and the lock with it */
  return rc;
}

/* The server's template image of `bytes`, open read-only: a fresh ext4 of that size, made once
 * (sparse: only mkfs's metadata holds blocks, a few MiB for gigabytes) and copied into every new
 * image after, instead of a mkfs process per instance. It lives in the workspaces' root (named
 * by its size, so a policy that changes workspace_max_bytes gets another), made under the same
 * lock as the reservations and renamed into place whole. */
static int open_template(int dir_fd, long long bytes, int nice, char *why, size_t size) {
  char name[64], tmp[80];
  snprintf(name, sizeof name, ".workspace-template-%lld.img", bytes);
  snprintf(tmp, sizeof tmp, "%s.new", name);
  int fd = -1, made = -1;
  int root = openat(dir_fd, "..", O_RDONLY | O_DIRECTORY | O_CLOEXEC);
  if (root < 0) {
    fail(why, size, errno, "cannot open the workspaces' root");
    goto out;
  }
  fd = openat(root, name, O_RDONLY | O_NOFOLLOW | O_CLOEXEC);
  if (fd >= 0)
    goto out;
  while (flock(root, LOCK_EX) < 0) {
    if (errno != EINTR) {
      fail(why, size, errno, "cannot lock the workspaces' root");
      goto out;
    }
  }
  fd = openat(root, name, O_RDONLY | O_NOFOLLOW | O_CLOEXEC); /* made while we waited */
  if (fd >= 0)
    goto out;
  (void)unlinkat(root, tmp, 0); /* a make a killed holder did not finish */
  made = openat(root, tmp, O_RDWR | O_CREAT | O_EXCL | O_NOFOLLOW | O_CLOEXEC, 0600);
  if (made < 0 || ftruncate(made, (off_t)bytes) < 0) {
    fail(why, size, errno, "cannot create the workspaces' template image");
    goto out;
  }
  if (make_fs(made, nice, why, size) < 0)
    goto out;
  if (fsync(made) < 0 || renameat(root, tmp, root, name) < 0) {
    fail(why, size, errno, "cannot put the workspaces' template image in place");
    goto out;
  }
  fd = openat(root, name, O_RDONLY | O_NOFOLLOW | O_CLOEXEC);
  if (fd < 0)
    fail(why, size, errno, "cannot open the workspaces' template image");
out:
  if (made >= 0) {
    close(made);
    if (fd < 0)
      (void)unlinkat(root, tmp, 0);
  }
  if (root >= 0)
    close(root); /* and the lock with it */
  return fd;
}

/* Copies the template's data (SEEK_DATA/SEEK_HOLE: its holes are left as the image's reserved,
 * unwritten extents, which read as zeros) into the new image `img`, in the kernel
 * (copy_file_range), or by read and write where it cannot. No reflink, even where the file system
 * has it: cloned blocks are shared with the template, so the image's reservation would no longer
 * hold them and a write there would need the host's disk again (docs/isolation.md "The host's
 * disk"). */
static int copy_template(int from, int img, long long bytes, char *why, size_t size) {
  off_t at = 0;
  while (at < (off_t)bytes) {
    off_t data = lseek(from, at, SEEK_DATA);
    if (data < 0 && errno == ENXIO)
      break; /* holes to the end */
    off_t hole = data < 0 ? -1 : lseek(from, data, SEEK_HOLE);
    if (data < 0 || hole < 0)
      return fail(why, size, errno, "cannot read the template image's extents");
    off_t in = data, out = data;
    while (in < hole) {
      ssize_t n = copy_file_range(from, &in, img, &out, (size_t)(hole - in), 0);
      if (n < 0 && (errno == EXDEV || errno == ENOSYS || errno == EINVAL || errno == EOPNOTSUPP)) {
        char buf[1 << 16];
        size_t want = (size_t)(hole - in) < sizeof buf ? (size_t)(hole - in) : sizeof buf;
        n = pread(from, buf, want, in);
        if (n > 0 && pwrite(img, buf, (size_t)n, out) != n)
          n = -1;
        if (n > 0) {
          in += n;
          out += n;
        }
      }
      if (n < 0 && errno == EINTR)
        continue;
      if (n <= 0)
        return fail(why, size, n < 0 ? errno : 0, "cannot copy the template image into the workspace's");
    }
    at = hole;
  }
  return 0;
}

/* A new image's file system: the template's, copied. */
static int fill_image(int img, int dir_fd, long long bytes, int nice, char *why, size_t size) {
  int from = open_template(dir_fd, bytes, nice, why, size);
  if (from < 0)
    return -1;
  int rc = copy_template(from, img, bytes, why, size);
  close(from);
  return rc;
}

/* The image, open read-write: the one there (a retired instance's replacement mounts its
 * predecessor's files, a slept thread's next instance its kept workspace: *existing is set, and
 * the caller reserves it once it holds the image's lock), else a new one, made under a temporary
 * name and renamed into place only once its file system is complete (the template's, copied),
 * wholly reserved first. */
static int open_image(int dir_fd, const char *name, long long bytes, long long reserve, int nice,
                      bool *existing, char *why, size_t size) {
  int img = openat(dir_fd, name, O_RDWR | O_NOFOLLOW | O_CLOEXEC);
  struct stat st;
  *existing = img >= 0;
  if (img >= 0) {
    if (fstat(img, &st) < 0 || !S_ISREG(st.st_mode)) {
      close(img);
      return fail(why, size, 0, "the workspace's image %s is not a regular file", name);
    }
    return img;
  }
  if (errno != ENOENT)
    return fail(why, size, errno, "cannot open the workspace's image %s", name);
  char tmp[NAME_MAX + 1];
  if (snprintf(tmp, sizeof tmp, "%s.new", name) >= (int)sizeof tmp)
    return fail(why, size, 0, "the image's name is too long: %s", name);
  (void)unlinkat(dir_fd, tmp, 0); /* a make an earlier holder did not finish */
  img = openat(dir_fd, tmp, O_RDWR | O_CREAT | O_EXCL | O_NOFOLLOW | O_CLOEXEC, 0600);
  if (img < 0)
    return fail(why, size, errno, "cannot create the workspace's image");
  if (reserve_image(img, dir_fd, bytes, reserve, true, why, size) == 0 &&
      fill_image(img, dir_fd, bytes, nice, why, size) == 0) {
    if (renameat(dir_fd, tmp, dir_fd, name) == 0)
      return img;
    fail(why, size, errno, "cannot rename the workspace's image into place");
  }
  close(img);
  (void)unlinkat(dir_fd, tmp, 0);
  return -1;
}

/* One mount of an image at a time. The instance before this one (retired, or killed from inside)
 * may still have the image mounted while the kernel tears its mount namespace down; a second
 * mount of the same ext4 image would then read what the first had not yet written back (a file
 * written just before came back empty) and later race it on the image's blocks. The lock is on
 * this open file, which LOOP_CONFIGURE makes the loop device's own: it is released when the
 * kernel detaches that device, after the last mount of it is gone — whichever instance took it.
 * The wait is bounded by the server's walls.ready_ms, which ends a holder that is not ready. */
static int hold_image(int img, char *why, size_t size) {
  if (flock(img, LOCK_EX | LOCK_NB) == 0)
    return 0;
  if (errno != EWOULDBLOCK)
    return fail(why, size, errno, "cannot lock the workspace's image");
  fprintf(stderr, "switchboard-walls: the workspace's image is still mounted by the instance before "
                  "this one; waiting for the kernel to release it\n");
  while (flock(img, LOCK_EX) < 0) {
    if (errno != EINTR)
      return fail(why, size, errno, "cannot lock the workspace's image");
  }
  return 0;
}

/* Opens loop device n read-write. Where /dev has no node for it (a container's /dev holds only
 * the devices it was given), one is made on a scratch tmpfs over the workspace directory (in our
 * private mount namespace), opened, and the tmpfs detached again: the open device stays. */
static int open_loop(int n, int dir_fd, const char *dir_path, char *why, size_t size) {
  char path[64];
  snprintf(path, sizeof path, "/dev/loop%d", n);
  int fd = open(path, O_RDWR | O_CLOEXEC);
  if (fd >= 0 || errno != ENOENT)
    return fd >= 0 ? fd : fail(why, size, errno, "cannot open %s", path);
  (void)dir_fd;
  if (mount("tmpfs", dir_path, "tmpfs", MS_NOSUID | MS_NOEXEC, "mode=0700,size=16k") < 0)
    return fail(why, size, errno, "%s is missing and no node can be made for it", path);
  /* the tmpfs is on top now: reached by the path, not the fd (which names the directory below) */
  int made = -1;
  int opened_on = open(dir_path, O_RDONLY | O_DIRECTORY | O_NOFOLLOW | O_CLOEXEC);
  if (opened_on >= 0 && mknodat(opened_on, "loop", S_IFBLK | 0600, makedev(LOOP_MAJOR, n)) == 0)
    made = openat(opened_on, "loop", O_RDWR | O_CLOEXEC);
  int err = errno;
  if (opened_on >= 0)
    close(opened_on);
  (void)umount2(dir_path, MNT_DETACH);
  if (made < 0)
    return fail(why, size, err, "%s is missing and the node made for it cannot be opened (a "
                "container needs --device /dev/loop-control and --device-cgroup-rule 'b 7:* rwm')",
                path);
  return made;
}

/* An empty file named `n` in the record directory: loop device n is this server's. */
static int record_loop(int record_dir, int n) {
  char name[16];
  snprintf(name, sizeof name, "%d", n);
  int fd = openat(record_dir, name, O_WRONLY | O_CREAT | O_NOFOLLOW | O_CLOEXEC, 0600);
  if (fd < 0)
    return -1;
  close(fd);
  return 0;
}

/* A free loop device backed by img, released by the kernel when its last user (the mount) goes;
 * recorded in record_dir (when >= 0) before anything else can fail. Returns its fd and its
 * number in *number, or -1. */
static int attach_loop(int img, int dir_fd, const char *dir_path, int record_dir, int *number,
                       char *why, size_t size) {
  int ctl = open("/dev/loop-control", O_RDWR | O_CLOEXEC);
  if (ctl < 0)
    return fail(why, size, errno, "/dev/loop-control (the workspace's file system is a loop "
                "device; a container needs --device /dev/loop-control and --device-cgroup-rule "
                "'b 7:* rwm')");
  for (int tries = 0; tries < LOOP_TRIES; tries++) {
    int n = ioctl(ctl, LOOP_CTL_GET_FREE);
    if (n < 0) {
      int err = errno;
      close(ctl);
      return fail(why, size, err, "no free loop device (LOOP_CTL_GET_FREE)");
    }
    int dev = open_loop(n, dir_fd, dir_path, why, size);
    if (dev < 0) {
      close(ctl);
      return -1;
    }
    struct loop_config cfg;
    memset(&cfg, 0, sizeof cfg);
    cfg.fd = (__u32)img;
    cfg.info.lo_flags = LO_FLAGS_AUTOCLEAR;
    if (ioctl(dev, LOOP_CONFIGURE, &cfg) == 0) {
      close(ctl);
      if (record_dir >= 0 && record_loop(record_dir, n) < 0) {
        int err = errno;
        close(dev); /* autoclear: the device is free again, as if never taken */
        return fail(why, size, err, "cannot record loop device %d (--loop-record)", n);
      }
      *number = n;
      return dev;
    }
    int err = errno;
    close(dev);
    if (err != EBUSY) {
      close(ctl);
      return fail(why, size, err, "cannot set up loop device %d (LOOP_CONFIGURE)", n);
    }
  }
  close(ctl);
  return fail(why, size, 0, "every free loop device was taken by others %d times over", LOOP_TRIES);
}

int walls_disk_mount(int dir_fd, const char *path, const char *name, long long bytes,
                     long long reserve, int nice, int record_dir, char *why, size_t why_size) {
  bool existing = false;
  int img = open_image(dir_fd, name, bytes, reserve, nice, &existing, why, why_size);
  if (img < 0)
    return -1;
  if (hold_image(img, why, why_size) < 0) {
    close(img);
    return -1;
  }
  /* An existing image is reserved whole only now, under its lock: a slept one's free blocks were
   * given back to the host's disk when it slept (sandboxd, e2fsck -E discard, under this same
   * lock), and a reservation made before the lock could be punched out again by that. Its own
   * size, whatever the policy says now: its ext4 was made to fill it. */
  if (existing) {
    struct stat st;
    int rc = fstat(img, &st) < 0 ? fail(why, why_size, errno, "cannot stat the workspace's image")
                                 : reserve_image(img, dir_fd, (long long)st.st_size, reserve, false,
                                                 why, why_size);
    if (rc < 0) {
      close(img);
      return -1;
    }
  }
  int number = -1;
  int dev = attach_loop(img, dir_fd, path, record_dir, &number, why, why_size);
  close(img); /* the loop device holds the file now */
  if (dev < 0)
    return -1;
  /* The target by its path: dir_fd was opened before our mount namespace was made, and a mount
   * onto a place of another namespace is refused (EINVAL). The path must still name the same
   * directory. */
  char source[32];
  snprintf(source, sizeof source, "/proc/self/fd/%d", dev);
  struct stat was, now;
  int here = open(path, O_RDONLY | O_DIRECTORY | O_NOFOLLOW | O_CLOEXEC);
  bool same = here >= 0 && fstat(here, &now) == 0 && fstat(dir_fd, &was) == 0 &&
              was.st_dev == now.st_dev && was.st_ino == now.st_ino;
  if (here >= 0)
    close(here);
  if (!same) {
    close(dev);
    return fail(why, why_size, 0, "%s changed while the instance was being made", path);
  }
  const char *target = path;
  /* no discard: a deleted file's blocks stay the image's, reserved on the host's disk (punched
   * out, the next write there would need the host's disk again, which may be full by then);
   * noinit_itable: the kernel does not zero inode tables in the background (the image's
   * unwritten extents read as zeros already). */
  int rc = mount(source, target, "ext4", MS_NOSUID | MS_NODEV, "noinit_itable");
  int err = errno;
  close(dev); /* the mount holds the device; with it gone, the kernel detaches it (autoclear) */
  if (rc < 0)
    return fail(why, why_size, err, "cannot mount the workspace's image over %s", path);
  return number;
}
