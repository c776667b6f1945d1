/* The walls helper's argv, read into its options (walls.h), and its one way to fail: `die`,
 * one line on stderr and exit status 70 (src/walls/walls.c has the modes and their options).
 * The helper decides nothing, so every path, uid and number it uses comes through here. */
#include <errno.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "walls/walls.h"

void die(const char *fmt, ...) {
  int err = errno;
  va_list ap;
  va_start(ap, fmt);
  fputs("walls: ", stderr);
  vfprintf(stderr, fmt, ap);
  va_end(ap);
  if (err != 0)
    fprintf(stderr, ": %s", strerror(err));
  fputc('\n', stderr);
  _exit(EXIT_WALLS);
}

static long long number(const char *flag, const char *s) {
  char *end;
  errno = 0;
  long long v = strtoll(s, &end, 10);
  if (errno != 0 || *end != '\0' || end == s || v < 0) {
    errno = 0;
    die("%s needs a non-negative integer, not '%s'", flag, s);
  }
  return v;
}

static void push(list *l, const char *flag, const char *v) {
  if (l->n >= MAX_LIST) {
    errno = 0;
    die("too many %s (at most %d)", flag, MAX_LIST);
  }
  l->items[l->n++] = v;
}

void parse(int argc, char **argv, options *o) {
  memset(o, 0, sizeof *o);
  o->uid = o->gid = o->pid = -1;
  o->nofile = o->fsize = o->nice = o->disk_bytes = -1;
  o->rootfs = "/";
  o->net = "host";
  o->hostname = "sandbox";
  o->cwd = "/workspace";
  errno = 0;
  if (argc < 2)
    die("usage: switchboard-walls hold|enter|reap [options] (docs/isolation.md)");
  o->mode = argv[1];
  int first = 2;
  if (strcmp(o->mode, "run") == 0 && argc > 2 && argv[2][0] != '-') {
    o->socket = argv[2]; /* run SOCKET -- PROGRAM ARG... */
    first = 3;
  }
  for (int i = first; i < argc; i++) {
    const char *f = argv[i];
    if (strcmp(f, "--") == 0) {
      o->command = &argv[i + 1];
      return;
    }
    if (i + 1 >= argc)
      die("%s needs a value", f);
    const char *v = argv[++i];
    if (strcmp(f, "--uid") == 0) o->uid = (long)number(f, v);
    else if (strcmp(f, "--gid") == 0) o->gid = (long)number(f, v);
    else if (strcmp(f, "--pid") == 0) o->pid = (long)number(f, v);
    else if (strcmp(f, "--nofile") == 0) o->nofile = number(f, v);
    else if (strcmp(f, "--fsize") == 0) o->fsize = number(f, v);
    else if (strcmp(f, "--nice") == 0) o->nice = number(f, v);
    else if (strcmp(f, "--disk-bytes") == 0) o->disk_bytes = number(f, v);
    else if (strcmp(f, "--disk-image") == 0) o->disk_image = v;
    else if (strcmp(f, "--disk-reserve") == 0) o->disk_reserve = number(f, v);
    else if (strcmp(f, "--cgroup") == 0) push(&o->cgroups, f, v);
    else if (strcmp(f, "--cg-write") == 0) push(&o->cg_writes, f, v);
    else if (strcmp(f, "--expose") == 0) push(&o->expose, f, v);
    else if (strcmp(f, "--hide") == 0) push(&o->hide, f, v);
    else if (strcmp(f, "--ro-bind") == 0) push(&o->ro_binds, f, v);
    else if (strcmp(f, "--locale") == 0) o->locale = v;
    else if (strcmp(f, "--home") == 0) o->home = v;
    else if (strcmp(f, "--passwd") == 0) o->passwd = v;
    else if (strcmp(f, "--group") == 0) o->group = v;
    else if (strcmp(f, "--workspace") == 0) o->workspace = v;
    else if (strcmp(f, "--rootfs") == 0) o->rootfs = v;
    else if (strcmp(f, "--net") == 0) o->net = v;
    else if (strcmp(f, "--hostname") == 0) o->hostname = v;
    else if (strcmp(f, "--outbound-if") == 0) o->outbound_if = v;
    else if (strcmp(f, "--bridge-port") == 0) o->bridge_port = v;
    else if (strcmp(f, "--cwd") == 0) o->cwd = v;
    else if (strcmp(f, "--socket") == 0) o->socket = v;
    else if (strcmp(f, "--loop-record") == 0) o->loop_record = v;
    else die("unknown option %s", f);
  }
}
