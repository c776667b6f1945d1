/* The spawner's protocol (docs/isolation.md): what a client — the engine's supervisor
 * (src/proc/spawn.c, core.spawn{walls = SOCKET}) or `switchboard-walls run` — sends to the
 * instance's `serve` loop over its unix socket, after a 4-byte length header that carries the
 * command's stdin, stdout and stderr (SCM_RIGHTS); then single bytes, each a signal for the
 * command's process group. The spawner answers with the reply below, once the command ended.
 *
 *   body = u32 argc | u32 envc | cwd NUL | argv[0] NUL ... | env[0] NUL ...
 *
 * (u32 in the host's byte order: both ends are this program on this host.) The parser faces
 * bytes from a socket, so it trusts nothing: it has a libFuzzer target
 * (tests/fuzz/fuzz_walls_request.c). */
#ifndef SB_WALLS_REQUEST_H
#define SB_WALLS_REQUEST_H

#include <stddef.h>
#include <stdint.h>
#include <sys/types.h>

enum {
  WALLS_MAX_REQUEST = 4 * 1024 * 1024, /* bytes of one body: a command text plus its env */
  WALLS_MAX_ARGS = 256,
  WALLS_MAX_ENV = 4096,
};

typedef struct {
  const char *cwd;
  char *argv[WALLS_MAX_ARGS + 1]; /* NULL-terminated; the strings point into the body */
  char *envp[WALLS_MAX_ENV + 1];  /* NULL-terminated; each "NAME=VALUE" */
  int argc, envc;
} walls_request;

/* Parses `len` bytes of `body` (owned by the caller, which keeps it alive as long as `out` is
 * used). Returns 0, or -1 with *why naming the defect (a static string). */
int walls_request_parse(char *body, size_t len, walls_request *out, const char **why);

/* The body for argv/envp/cwd in a new malloc'd buffer (the caller frees it) and its length in
 * *len; NULL when it would exceed the limits above. */
char *walls_request_encode(char *const *argv, char *const *envp, const char *cwd, size_t *len);

/* Sends the 4-byte header for a body of `len` bytes, the three stdio `fds` (SCM_RIGHTS) with it,
 * and as much of `body` as the socket takes now (retried on EINTR; MSG_NOSIGNAL). Returns how
 * many of the body's bytes went (0..len; the rest is the caller's to send), or -1 with errno
 * when not even the header went. */
long walls_request_send(int sock, const char *body, size_t len, const int fds[3]);

/* The reply: the command's wait status (as waitpid gives it), 4 bytes in the host's order.
 * The engine decodes it from bytes that come from inside the instance, so it trusts nothing
 * (tests/fuzz/fuzz_walls_reply.c). */
enum { WALLS_REPLY_LEN = 4 };

/* Decodes the `len` bytes received so far. Returns 1 when they are a whole reply — the
 * command exited with *exit_code (0-255, *signo 0) or was killed by *signo (1-64, *exit_code
 * 0) — 0 when more bytes are needed, -1 when they cannot be a reply (too many bytes, or a
 * status that is neither an exit nor a death by a signal). */
int walls_reply_decode(const unsigned char *bytes, size_t len, int *exit_code, int *signo);

#endif
