/* The spawner's protocol (docs/isolation.md): what a client — the engine's supervisor
 * (src/proc/link.c, core.spawn{walls = SOCKET}) or `switchboard-walls run` — sends to the
 * instance's `serve` loop over its unix socket, and what comes back. One connection carries
 * many commands at once (the engine keeps one per instance: no connect per command), as frames:
 *
 *   client → spawner   u32 kind | u32 id | u32 n
 *     kind COMMAND: a command numbered `id` (chosen by the client, not 0, unique among its
 *       commands still running on this connection); the n bytes of its body follow, and the
 *       frame's first byte carries the command's stdin, stdout and stderr (SCM_RIGHTS).
 *     kind SIGNAL: n is a signal for the process group of the client's command `id`.
 *   spawner → client   u32 id | i32 wait status   once per command, when it has ended
 *
 *   body = u32 argc | u32 envc | cwd NUL | argv[0] NUL ... | env[0] NUL ...
 *
 * The connection closing kills the group of every command it started (the client is gone).
 * (u32 in the host's byte order: both ends are this program on this host.) The parsers face
 * bytes from a socket, so they trust nothing: the request's and the frame's have a libFuzzer
 * target (tests/fuzz/fuzz_walls_request.c), the reply's another (fuzz_walls_reply.c). */
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

enum { WALLS_FRAME_LEN = 12, WALLS_FRAME_COMMAND = 1, WALLS_FRAME_SIGNAL = 2 };

typedef struct {
  uint32_t kind, id, n;
} walls_frame;

/* The 12 bytes of a frame's header. */
void walls_frame_encode(unsigned char out[WALLS_FRAME_LEN], uint32_t kind, uint32_t id, uint32_t n);

/* Decodes a frame's header. Returns 0, or -1 when it cannot be one (an unknown kind, id 0, a
 * body over WALLS_MAX_REQUEST, a signal number out of 1-64). */
int walls_frame_decode(const unsigned char in[WALLS_FRAME_LEN], walls_frame *out);

/* Sends command `id`'s frame header for a body of `len` bytes, the three stdio `fds`
 * (SCM_RIGHTS) with it, and as much of `body` as the socket takes now (retried on EINTR;
 * MSG_NOSIGNAL, and MSG_DONTWAIT when `nonblocking`). Returns how many of the body's bytes went
 * (0..len; the rest is the caller's to send), or -1 with errno when not even the header went
 * (EAGAIN: nothing went, the socket is full). */
long walls_request_send(int sock, uint32_t id, const char *body, size_t len, const int fds[3],
                        int nonblocking);

/* The reply: the command's id and wait status (as waitpid gives it), 8 bytes in the host's
 * order. The engine decodes it from bytes that come from inside the instance, so it trusts
 * nothing (tests/fuzz/fuzz_walls_reply.c). */
enum { WALLS_REPLY_LEN = 8 };

/* The 8 bytes of command `id`'s reply. */
void walls_reply_encode(unsigned char out[WALLS_REPLY_LEN], uint32_t id, int status);

/* Decodes the `len` bytes received so far. Returns 1 when they are a whole reply for command
 * *id — the command exited with *exit_code (0-255, *signo 0) or was killed by *signo (1-64,
 * *exit_code 0) — 0 when more bytes are needed, -1 when they cannot be a reply (too many
 * bytes, or a status that is neither an exit nor a death by a signal; *id is still the id the
 * bytes name, when there were 8). */
int walls_reply_decode(const unsigned char *bytes, size_t len, uint32_t *id, int *exit_code,
                       int *signo);

#endif
