/* The peer's progress on a TCP socket (see tcp_progress.h). A file of its own because it needs
 * <linux/tcp.h>, whose struct tcp_info has the field glibc's <netinet/tcp.h> (included by
 * uv.h) lacks; the two headers cannot meet in one file. */
#include "tcp_progress.h"

#include <linux/tcp.h>
#include <netinet/in.h>
#include <stddef.h>
#include <sys/socket.h>

bool sb_tcp_bytes_acked(int fd, uint64_t *acked) {
  struct tcp_info info;
  socklen_t len = sizeof info;
  if (getsockopt(fd, IPPROTO_TCP, TCP_INFO, &info, &len) != 0)
    return false;
  /* An older kernel fills less of the struct (the field came in Linux 4.1). */
  if (len < offsetof(struct tcp_info, tcpi_bytes_acked) + sizeof info.tcpi_bytes_acked)
    return false;
  *acked = info.tcpi_bytes_acked;
  return true;
}
