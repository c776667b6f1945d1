/* http_probe: a scripted raw TCP peer for the HTTP server specs. It does what real clients
 * rarely do on purpose: trickles a head byte by byte, sends malformed bytes, stops reading,
 * hangs up mid-response.
 *
 *   http_probe [--timeout MS] HOST PORT STEP...
 *
 * Steps run in order:
 *   send:TEXT         send TEXT (C escapes: \r \n \t \\ \0 \xNN)
 *   fill:N:C          send N bytes of the character C
 *   file:PATH         send the bytes of the file PATH in one write (for payloads argv cannot
 *                     carry: one argument holds at most 128 KiB)
 *   trickle:MS:TEXT   send TEXT one byte every MS milliseconds
 *   wait:TEXT         read until the bytes received since the last wait contain TEXT
 *   sleep:MS          pause without reading
 *   await:PATH        pause without reading until the file PATH exists (the spec says when,
 *                     instead of a fixed pause a loaded machine may outlast)
 *   mark:PATH         create the file PATH (tells the spec the steps before it are done)
 *   shut              shut down the write side
 *   close             close the socket now and stop
 *   read              read until EOF (also done after the last step unless it was close)
 *
 * Every received byte goes to stdout as it arrives; when the probe ends it writes one status
 * line to stderr: "probe: eof", "probe: reset", "probe: timeout", "probe: closed",
 * "probe: connect-failed", optionally preceded by "probe: send-failed" when the server hung up
 * while we were sending. The whole run is bounded by --timeout (default 10000 ms). */
#ifndef _GNU_SOURCE
#define _GNU_SOURCE
#endif
#include <arpa/inet.h>
#include <errno.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <poll.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <time.h>
#include <unistd.h>

static int fd = -1;
static long long deadline_ms;
static char *received;
static size_t received_len, received_cap, wait_from;

static long long now_ms(void) {
  struct timespec ts;
  clock_gettime(CLOCK_MONOTONIC, &ts);
  return (long long)ts.tv_sec * 1000 + ts.tv_nsec / 1000000;
}

static void finish(const char *status) {
  fprintf(stderr, "probe: %s\n", status);
  exit(0);
}

static size_t unescape(const char *in, char *out) {
  size_t n = 0;
  for (const char *p = in; *p; p++) {
    if (*p != '\\' || p[1] == '\0') {
      out[n++] = *p;
      continue;
    }
    p++;
    switch (*p) {
    case 'r': out[n++] = '\r'; break;
    case 'n': out[n++] = '\n'; break;
    case 't': out[n++] = '\t'; break;
    case '0': out[n++] = '\0'; break;
    case 'x': {
      char hex[3] = {p[1], p[1] ? p[2] : 0, 0};
      out[n++] = (char)strtol(hex, NULL, 16);
      p += 2;
      break;
    }
    default: out[n++] = *p; break;
    }
  }
  return n;
}

/* Reads what is available within `ms` (bounded by the deadline). Returns false at EOF. */
static int read_some(long long ms) {
  long long left = deadline_ms - now_ms();
  if (left <= 0)
    finish("timeout");
  if (ms < 0 || ms > left)
    ms = left;
  struct pollfd p = {fd, POLLIN, 0};
  int r = poll(&p, 1, (int)ms);
  if (r <= 0)
    return 1;
  char buf[65536];
  ssize_t n = read(fd, buf, sizeof buf);
  if (n == 0)
    return 0;
  if (n < 0) {
    if (errno == ECONNRESET)
      finish("reset");
    return errno == EINTR || errno == EAGAIN;
  }
  if (write(1, buf, (size_t)n) < 0) {
    /* stdout gone: nothing to report to */
  }
  if (received_len + (size_t)n + 1 > received_cap) {
    received_cap = (received_len + (size_t)n + 1) * 2;
    received = realloc(received, received_cap);
    if (received == NULL)
      abort();
  }
  memcpy(received + received_len, buf, (size_t)n);
  received_len += (size_t)n;
  return 1;
}

static int send_failed;

static void send_all(const char *data, size_t len) {
  while (len > 0 && !send_failed) {
    struct pollfd p = {fd, POLLOUT, 0};
    long long left = deadline_ms - now_ms();
    if (left <= 0)
      finish("timeout");
    if (poll(&p, 1, (int)left) <= 0)
      continue;
    ssize_t n = send(fd, data, len, MSG_NOSIGNAL);
    if (n < 0) {
      if (errno == EINTR || errno == EAGAIN)
        continue;
      send_failed = 1;
      fprintf(stderr, "probe: send-failed\n");
      return;
    }
    data += n;
    len -= (size_t)n;
    /* keep reading meanwhile so a server answer (413) is not lost to our own backlog */
    read_some(0);
  }
}

static void wait_for(const char *text, size_t n) {
  for (;;) {
    if (received_len >= wait_from + n) {
      char *hit = memmem(received + wait_from, received_len - wait_from, text, n);
      if (hit != NULL) {
        wait_from = (size_t)(hit - received) + n;
        return;
      }
    }
    if (!read_some(-1))
      finish("eof");
  }
}

static void sleep_ms(long long ms) {
  struct timespec ts = {ms / 1000, (ms % 1000) * 1000000};
  nanosleep(&ts, NULL);
}

/* Polls for the file every 10 ms until it exists, bounded by the whole run's deadline. */
static void await_file(const char *path) {
  while (access(path, F_OK) != 0) {
    if (now_ms() >= deadline_ms)
      finish("timeout");
    sleep_ms(10);
  }
}

int main(int argc, char **argv) {
  int i = 1;
  long long timeout = 10000;
  if (argc > 2 && strcmp(argv[1], "--timeout") == 0) {
    timeout = atoll(argv[2]);
    i = 3;
  }
  if (argc - i < 2) {
    fprintf(stderr, "usage: http_probe [--timeout MS] HOST PORT STEP...\n");
    return 2;
  }
  signal(SIGPIPE, SIG_IGN);
  deadline_ms = now_ms() + timeout;
  struct sockaddr_in addr = {.sin_family = AF_INET, .sin_port = htons((uint16_t)atoi(argv[i + 1]))};
  inet_pton(AF_INET, argv[i], &addr.sin_addr);
  fd = socket(AF_INET, SOCK_STREAM, 0);
  if (connect(fd, (struct sockaddr *)&addr, sizeof addr) != 0)
    finish("connect-failed");
  int one = 1;
  setsockopt(fd, IPPROTO_TCP, TCP_NODELAY, &one, sizeof one);
  for (i += 2; i < argc; i++) {
    const char *step = argv[i];
    char *buf = malloc(strlen(step) + 1);
    if (strncmp(step, "send:", 5) == 0) {
      send_all(buf, unescape(step + 5, buf));
    } else if (strncmp(step, "fill:", 5) == 0) {
      char *colon = strchr(step + 5, ':');
      size_t n = (size_t)atoll(step + 5);
      char *big = malloc(n ? n : 1);
      memset(big, colon ? colon[1] : 'x', n);
      send_all(big, n);
      free(big);
    } else if (strncmp(step, "file:", 5) == 0) {
      FILE *f = fopen(step + 5, "rb");
      if (f == NULL)
        finish("file-missing");
      fseek(f, 0, SEEK_END);
      long size = ftell(f);
      fseek(f, 0, SEEK_SET);
      char *whole = malloc(size > 0 ? (size_t)size : 1);
      size_t got = fread(whole, 1, size > 0 ? (size_t)size : 0, f);
      fclose(f);
      send_all(whole, got);
      free(whole);
    } else if (strncmp(step, "trickle:", 8) == 0) {
      char *colon = strchr(step + 8, ':');
      long long ms = atoll(step + 8);
      size_t n = unescape(colon ? colon + 1 : "", buf);
      for (size_t k = 0; k < n && !send_failed; k++) {
        send_all(buf + k, 1);
        long long until = now_ms() + ms;
        while (now_ms() < until)
          if (!read_some(until - now_ms()))
            finish("eof");
      }
    } else if (strncmp(step, "wait:", 5) == 0) {
      wait_for(buf, unescape(step + 5, buf));
    } else if (strncmp(step, "sleep:", 6) == 0) {
      sleep_ms(atoll(step + 6));
    } else if (strncmp(step, "await:", 6) == 0) {
      await_file(step + 6);
    } else if (strncmp(step, "mark:", 5) == 0) {
      FILE *m = fopen(step + 5, "w");
      if (m == NULL)
        finish("mark-failed");
      fclose(m);
    } else if (strcmp(step, "shut") == 0) {
      shutdown(fd, SHUT_WR);
    } else if (strcmp(step, "close") == 0) {
      close(fd);
      finish("closed");
    } else if (strcmp(step, "read") == 0) {
      while (read_some(-1)) {
      }
      finish("eof");
    } else {
      fprintf(stderr, "http_probe: unknown step '%s'\n", step);
      return 2;
    }
    free(buf);
  }
  while (read_some(-1)) {
  }
  finish("eof");
}
