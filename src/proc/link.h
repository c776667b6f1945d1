/* The engine's one connection to each sandbox instance's spawner (docs/isolation.md, issue 43):
 * every walled command of the process goes to its instance over it, as frames of the spawner's
 * protocol (walls/request.h), instead of a connection of its own — no connect, accept and close
 * per command. A link is made by the first command for its socket path and lives until the
 * spawner's end closes (the instance stopped or died: every command still on it is lost) or the
 * engine shuts down (closing it kills every command it started).
 *
 * A command on a link is a member: its number there, and the function told once how it ended.
 * The member is the caller's memory (inside its process record); the link only lists it. */
#ifndef SB_PROC_LINK_H
#define SB_PROC_LINK_H

#include <stddef.h>
#include <stdint.h>

struct sb_link;

typedef struct sb_link_member {
  struct sb_link *link; /* NULL once it has ended or left */
  uint32_t id;
  /* Told once: rc 1 — the command exited with exit_code or was killed by signo; -1 — the
   * spawner sent what is not a wait status; 0 — the link ended first (the instance is gone).
   * The member is off the link when this runs. */
  void (*ended)(struct sb_link_member *m, int rc, int exit_code, int signo);
  struct sb_link_member *prev, *next;
} sb_link_member;

/* Sends a command (`body`, request.h, and its stdin, stdout and stderr `fds`, which stay the
 * caller's) to the spawner at `path` over its link, made first when there is none, or when the
 * one there has found its spawner gone. What the socket does not take at once is queued (with
 * copies of the fds) and sent in order. `m->ended` must be set. Returns 0 with `m` listed, or
 * an errno value (ECONNREFUSED/ENOENT: no spawner there). */
int sb_link_command(const char *path, const char *body, size_t len, const int fds[3],
                    sb_link_member *m);

/* A signal for the member's command's group (queued behind what is not sent yet). */
void sb_link_signal(sb_link_member *m, int signo);

/* Reads, without waiting, whatever the member's link has already received, and tells each
 * member that ended (this one, perhaps). */
void sb_link_read_now(sb_link_member *m);

/* The member goes before its command has ended (the engine shuts down): its group is sent
 * SIGKILL, and it is never told. */
void sb_link_leave(sb_link_member *m);

/* Closes every link (engine shutdown): each spawner kills the commands it started. */
void sb_link_close_all(void);

#endif
