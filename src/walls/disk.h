/* A workspace's own file system (docs/isolation.md "Workspace size while writing"): an ext4
 * image inside the workspace's host directory, wholly reserved on the host's disk (docs/
 * isolation.md "The host's disk"), loop-mounted over that directory in the holder's private
 * mount namespace, so the kernel refuses a write past the image's size (ENOSPC) while the
 * command writes. The mount exists only in the instance's namespaces: when the instance's last
 * process ends, the kernel unmounts it and the loop device, set up with LO_FLAGS_AUTOCLEAR, is
 * released — nothing is left behind, after a kill -9 of anything too. */
#ifndef SB_WALLS_DISK_H
#define SB_WALLS_DISK_H

#include <stddef.h>

/* Mounts the image `name` (made `bytes` long when missing; mkfs runs at niceness `nice` when
 * > 0) of the workspace directory open as `dir_fd` (its host path `path`) over that directory,
 * in the calling process's mount namespace (which must be private: the caller unshares it).
 * The image is reserved on the host's disk first, only while `reserve` bytes stay free beside
 * it; else refused, "the host's disk is full: …" in `why`. Returns the number of the loop device
 * it is mounted from (the server gives it back when the instance is gone: src/walls/loops.h),
 * or -1 with what failed and why written to `why` (errno not kept). With `record_dir` (an open
 * directory; -1: none) the device is recorded there, as an empty file named by its number, as
 * soon as it is attached: should anything after fail, or the server be killed, the next server
 * finds which devices were its (docs/isolation.md "Loop devices given back"). */
int walls_disk_mount(int dir_fd, const char *path, const char *name, long long bytes,
                     long long reserve, int nice, int record_dir, char *why, size_t why_size);

#endif
