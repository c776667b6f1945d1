/* Spawning, apart from supervising (supervise.c): reading argv, env and cwd from the options
 * table, finding the program in the child's PATH, and starting it with posix_spawn in its own
 * session with pipes for its standard streams and a pidfd to watch it by.
 *
 * Reading allocates nothing outside Lua: the argv and envp arrays are userdata and every
 * string is a Lua string, all anchored on the caller's stack, so an option that raises (here
 * or later in the caller) leaks nothing. Starting owns descriptors only, and on failure closes
 * every one it opened (its one cleanup path). */
#ifndef SB_PROC_SPAWN_H
#define SB_PROC_SPAWN_H

#include <lua.h>
#include <stdbool.h>
#include <sys/types.h>

#include "link.h"

typedef struct {
  char *const *argv; /* NULL-terminated; strings and array anchored on the Lua stack */
  char *const *envp; /* NULL-terminated "NAME=value"; likewise anchored */
  const char *cwd;   /* NULL: the engine's own; anchored by the options table */
} sb_spawn_args;

/* Reads opts.argv (a non-empty array of strings), opts.env (NAME = value strings; nil is an
 * empty environment) and opts.cwd (a string or nil) from the table at `opts`, leaving their
 * anchors on the stack. Raises on a malformed option. */
void sb_spawn_read(lua_State *L, int opts, sb_spawn_args *a);

/* The parent's ends of a started child. */
typedef struct {
  pid_t pid;      /* also its process group and session id */
  int pidfd;      /* readable once the child has exited */
  int stdin_fd;   /* write end of its stdin, or -1 when it reads /dev/null */
  int stdout_fd;  /* read ends of its stdout and stderr */
  int stderr_fd;
} sb_spawned;

/* Starts the child; every descriptor made is close-on-exec in the parent. Returns 0 with `out`
 * filled (the caller owns its descriptors), or an errno value with nothing left open and no
 * child left behind. */
int sb_spawn_start(const sb_spawn_args *a, bool with_stdin, sb_spawned *out);

/* Starts the child inside a sandbox instance (docs/isolation.md): sends the instance's spawner
 * at `socket_path`, over the engine's link to it (link.h: one connection per instance), the
 * request — argv, env and cwd (NULL: /workspace) with the child's stdin, stdout and stderr
 * (SCM_RIGHTS). The spawner, already inside the instance's namespaces and cgroups, vforks the
 * command; `member` (its `ended` set by the caller) is told its wait status, and signals its
 * group (sb_link_signal). `out->pid` is 0 and `out->pidfd` -1. Returns 0, or an errno value
 * with nothing left open (ECONNREFUSED/ENOENT: no spawner there; E2BIG: over the request's
 * limits). */
int sb_spawn_walled(const sb_spawn_args *a, const char *socket_path, bool with_stdin,
                    sb_spawned *out, sb_link_member *member);

#endif
