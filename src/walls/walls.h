/* What the walls helper's files share (src/walls/walls.c says what the helper is; each file
 * below is one step of it). Internal to the helper's program: the engine includes only
 * request.h. Every function here either does its step or dies with one "walls:" line (die). */
#ifndef SB_WALLS_WALLS_H
#define SB_WALLS_WALLS_H

#include <limits.h>
#include <stdbool.h>
#include <sys/resource.h>
#include <sys/types.h>

enum {
  EXIT_WALLS = 70,
  MAX_LIST = 64,       /* cgroups, exposed names, hidden paths, cgroup writes */
  MAX_BWRAP_ARGS = 512,
  REAP_ROUNDS = 200,   /* × 10 ms: how long reap waits for a cgroup to empty */
};

typedef struct {
  const char *items[MAX_LIST];
  int n;
} list;

/* Everything the argv says; strings point into argv (owned by the kernel's copy). */
typedef struct {
  const char *mode;
  long uid, gid, pid;
  list cgroups, expose, hide, cg_writes, ro_binds;
  const char *workspace, *rootfs, *net, *hostname, *cwd;
  const char *disk_image;  /* hold: the workspace's own file system, an image of this name in it */
  const char *outbound_if; /* hold, --net host: the host interface pasta's sockets are bound to */
  const char *bridge_port; /* hold, --net host: through a bridge instead of pasta (bridge.h) */
  long long disk_bytes;    /* its size; -1: none (the workspace is the host's directory) */
  long long disk_reserve;  /* bytes the host's disk keeps free beside it (0: none) */
  const char *socket;      /* hold: the spawner's socket path to bind; run: to connect to */
  const char *loop_record; /* hold: a directory where the loop device attached is recorded (a file
                              named by its number) before anything can fail: a later server finds it */
  const char *locale;      /* hold: a directory shown read-only at /usr/lib/locale (NULL: the host's) */
  const char *home;        /* hold: a directory made in the private /tmp for HOME (NULL: none) */
  const char *passwd, *group; /* hold: the text shown read-only at /etc/passwd, /etc/group (NULL: the host's) */
  long long nofile, fsize; /* -1: leave as inherited */
  long long nice;          /* hold: bwrap's niceness (a spare built in the background); -1: ours */
  char **command;          /* enter: PROGRAM ARG... (NULL-terminated, inside argv) */
} options;

/* main's argv: blanked by the spawner (serve) */
extern char **arg_area;

/* ---- options.c: the argv, and the helper's one way to fail -------------------------------- */

/* One line on stderr, "walls: " + the message (+ ": " + strerror(errno) when errno is set),
 * then exit status 70. */
void die(const char *fmt, ...) __attribute__((noreturn, format(printf, 1, 2)));
void parse(int argc, char **argv, options *o);

/* ---- process.c: what the helper's processes become, and how their end is told ------------ */

void drop_to(const options *o);
void die_with_parent(pid_t parent);
void set_limit(int resource, long long value, const char *name);
bool limit_for(int resource, long long value, struct rlimit *out);
void drop_capabilities(void);
int mirror_status(int status);
void stdout_to_null(void);

/* ---- cgroups.c ------------------------------------------------------------------------------ */

int write_file(const char *path, const char *value);
void join_cgroups(const options *o, bool create);
int reap(const options *o);

/* ---- outbound.c: the instance's outbound network (--net host) ------------------------------ */

typedef struct {
  pid_t pid;   /* the launcher; 0: none (--net none) */
  int go, up;  /* holder → launcher: the instance's pid; launcher → holder: one byte, ready */
} outbound;

outbound outbound_start(const options *o);
bool outbound_go(outbound *ob, long inner);
bool outbound_ready(outbound *ob);

/* ---- bwrap.c: bwrap's argv, and what bwrap tells back --------------------------------------- */

typedef struct {
  char *argv[MAX_BWRAP_ARGS];
  int n;
  char scratch[MAX_LIST][PATH_MAX]; /* paths built for --expose */
  int ro_fds[MAX_LIST];             /* --ro-bind directories, opened before the drop (CLOEXEC) */
  char ro_fd_text[MAX_LIST][16];    /* their numbers, as bwrap's arguments */
  int locale_fd;                    /* --locale's directory, opened likewise; -1: none */
  char locale_fd_text[16];
  int passwd_fd, group_fd;          /* pipes holding --passwd's and --group's text; -1: none */
  char passwd_fd_text[16], group_fd_text[16];
} bwrap_args;

void build_bwrap(const options *o, bwrap_args *b);
long read_child_pid(int fd);

/* ---- mounts.c: the workspace's way in ------------------------------------------------------- */

int mount_disk(const options *o, int ws, int *loop);
int stage_reachable(const options *o, int fd, const char *path, int k);

/* ---- hold.c, enter.c, spawner.c, run.c: the modes -------------------------------------------- */

int hold(const options *o);
int enter(const options *o);
int namespaces_of(long pid);
void enter_instance(long pid, pid_t parent);
int bind_spawner(const char *path);
int serve(const options *o, int listener, pid_t bwrap);
int run(const options *o);

#endif
