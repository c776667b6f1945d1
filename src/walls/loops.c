/* LOOP_CTL_REMOVE for a device the walls attached (loops.h). */
#include "walls/loops.h"

#include <errno.h>
#include <fcntl.h>
#include <linux/loop.h>
#include <sys/ioctl.h>
#include <unistd.h>

int walls_loop_remove(int n) {
  int ctl = open("/dev/loop-control", O_RDWR | O_CLOEXEC);
  if (ctl < 0)
    return -errno;
  int rc = ioctl(ctl, LOOP_CTL_REMOVE, n) < 0 ? -errno : 0;
  close(ctl);
  return rc;
}
