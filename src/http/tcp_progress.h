/* How far a peer has read what a TCP socket sent: the kernel's own count, for telling a peer
 * that stopped reading from one that reads slowly, or from our own process having been held up. */
#ifndef SB_HTTP_TCP_PROGRESS_H
#define SB_HTTP_TCP_PROGRESS_H

#include <stdbool.h>
#include <stdint.h>

/* The bytes the peer of TCP socket `fd` has acknowledged so far (Linux's tcpi_bytes_acked, a
 * count that only grows). False when the socket cannot say (not TCP, or closed). */
bool sb_tcp_bytes_acked(int fd, uint64_t *acked);

#endif
