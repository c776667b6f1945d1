/* The spawner's request body: parse and encode (request.h). */
#include "walls/request.h"

#include <errno.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <sys/wait.h>

/* The next NUL-terminated string at *pos, or NULL when the body ends first. */
static char *next_string(char *body, size_t len, size_t *pos) {
  if (*pos >= len)
    return NULL;
  char *s = body + *pos;
  char *nul = memchr(s, '\0', len - *pos);
  if (nul == NULL)
    return NULL;
  *pos += (size_t)(nul - s) + 1;
  return s;
}

int walls_request_parse(char *body, size_t len, walls_request *out, const char **why) {
  uint32_t argc, envc;
  size_t pos = 2 * sizeof(uint32_t);
  memset(out, 0, sizeof *out);
  if (len < pos || len > WALLS_MAX_REQUEST) {
    *why = "request size out of range";
    return -1;
  }
  memcpy(&argc, body, sizeof argc);
  memcpy(&envc, body + sizeof argc, sizeof envc);
  if (argc < 1 || argc > WALLS_MAX_ARGS || envc > WALLS_MAX_ENV) {
    *why = "argument or environment count out of range";
    return -1;
  }
  out->cwd = next_string(body, len, &pos);
  if (out->cwd == NULL || out->cwd[0] != '/') {
    *why = "the working directory is missing or not absolute";
    return -1;
  }
  for (uint32_t i = 0; i < argc; i++) {
    out->argv[i] = next_string(body, len, &pos);
    if (out->argv[i] == NULL) {
      *why = "an argument is cut short";
      return -1;
    }
  }
  if (out->argv[0][0] == '\0') {
    *why = "the program name is empty";
    return -1;
  }
  for (uint32_t i = 0; i < envc; i++) {
    out->envp[i] = next_string(body, len, &pos);
    if (out->envp[i] == NULL || strchr(out->envp[i], '=') == NULL || out->envp[i][0] == '=') {
      *why = "an environment entry is cut short or not NAME=VALUE";
      return -1;
    }
  }
  if (pos != len) {
    *why = "bytes after the last environment entry";
    return -1;
  }
  out->argc = (int)argc;
  out->envc = (int)envc;
  out->argv[argc] = NULL;
  out->envp[envc] = NULL;
  return 0;
}

char *walls_request_encode(char *const *argv, char *const *envp, const char *cwd, size_t *len) {
  uint32_t argc = 0, envc = 0;
  size_t total = 2 * sizeof(uint32_t) + strlen(cwd) + 1;
  for (; argv[argc] != NULL; argc++)
    total += strlen(argv[argc]) + 1;
  for (; envp[envc] != NULL; envc++)
    total += strlen(envp[envc]) + 1;
  if (argc < 1 || argc > WALLS_MAX_ARGS || envc > WALLS_MAX_ENV || total > WALLS_MAX_REQUEST)
    return NULL;
  char *body = malloc(total);
  if (body == NULL)
    return NULL;
  size_t pos = 0;
  memcpy(body, &argc, sizeof argc);
  memcpy(body + sizeof argc, &envc, sizeof envc);
  pos = 2 * sizeof(uint32_t);
  size_t n = strlen(cwd) + 1;
  memcpy(body + pos, cwd, n);
  pos += n;
  for (uint32_t i = 0; i < argc; i++, pos += n) {
    n = strlen(argv[i]) + 1;
    memcpy(body + pos, argv[i], n);
  }
  for (uint32_t i = 0; i < envc; i++, pos += n) {
    n = strlen(envp[i]) + 1;
    memcpy(body + pos, envp[i], n);
  }
  *len = total;
  return body;
}

void walls_frame_encode(unsigned char out[WALLS_FRAME_LEN], uint32_t kind, uint32_t id, uint32_t n) {
  memcpy(out, &kind, 4);
  memcpy(out + 4, &id, 4);
  memcpy(out + 8, &n, 4);
}

int walls_frame_decode(const unsigned char in[WALLS_FRAME_LEN], walls_frame *out) {
  memcpy(&out->kind, in, 4);
  memcpy(&out->id, in + 4, 4);
  memcpy(&out->n, in + 8, 4);
  if (out->id == 0)
    return -1;
  if (out->kind == WALLS_FRAME_COMMAND)
    return out->n <= WALLS_MAX_REQUEST ? 0 : -1;
  if (out->kind == WALLS_FRAME_SIGNAL)
    return out->n >= 1 && out->n <= 64 ? 0 : -1;
  return -1;
}

void walls_reply_encode(unsigned char out[WALLS_REPLY_LEN], uint32_t id, int status) {
  memcpy(out, &id, 4);
  memcpy(out + 4, &status, 4);
}

int walls_reply_decode(const unsigned char *bytes, size_t len, uint32_t *id, int *exit_code,
                       int *signo) {
  int status;
  *exit_code = *signo = 0;
  if (len < WALLS_REPLY_LEN)
    return 0;
  if (len > WALLS_REPLY_LEN)
    return -1;
  memcpy(id, bytes, 4);
  memcpy(&status, bytes + 4, sizeof status);
  if (WIFEXITED(status) && (status & ~0xff00) == 0) {
    *exit_code = WEXITSTATUS(status);
    return 1;
  }
  /* killed: the signal in the low 7 bits, maybe the core-dump bit, nothing above */
  if (WIFSIGNALED(status) && (status & ~0xff) == 0 && WTERMSIG(status) <= 64) {
    *signo = WTERMSIG(status);
    return 1;
  }
  return -1;
}

long walls_request_send(int sock, uint32_t id, const char *body, size_t len, const int fds[3],
                        int nonblocking) {
  unsigned char header[WALLS_FRAME_LEN];
  walls_frame_encode(header, WALLS_FRAME_COMMAND, id, (uint32_t)len);
  union {
    char buf[CMSG_SPACE(3 * sizeof(int))];
    struct cmsghdr align;
  } control;
  memset(&control, 0, sizeof control);
  struct iovec iov[2] = {{header, sizeof header}, {(void *)body, len}};
  struct msghdr msg;
  memset(&msg, 0, sizeof msg);
  msg.msg_iov = iov;
  msg.msg_iovlen = 2;
  msg.msg_control = control.buf;
  msg.msg_controllen = sizeof control.buf;
  struct cmsghdr *c = CMSG_FIRSTHDR(&msg);
  c->cmsg_level = SOL_SOCKET;
  c->cmsg_type = SCM_RIGHTS;
  c->cmsg_len = CMSG_LEN(3 * sizeof(int));
  memcpy(CMSG_DATA(c), fds, 3 * sizeof(int));
  ssize_t sent;
  do
    sent = sendmsg(sock, &msg, MSG_NOSIGNAL | (nonblocking ? MSG_DONTWAIT : 0));
  while (sent < 0 && errno == EINTR);
  if (sent < 0)
    return -1;
  if (sent < (ssize_t)sizeof header) { /* the header is smaller than any socket's room */
    errno = EPIPE;
    return -1;
  }
  return (long)((size_t)sent - sizeof header);
}
