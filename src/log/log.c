/* Structured logging (see log.h). Knows nothing of Lua: the Lua face is log_lua.c. */
#include "log.h"
#include "log_line.h"

#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <sys/stat.h>
#include <unistd.h>

enum { REDACT_MIN_LEN = 6 };

static struct {
  bool json;
  int min_level;
  char **secrets; /* owned copies */
  size_t n_secrets;
} G = {false, 1, NULL, 0};

static int level_rank(const char *level) {
  static const char *names[] = {"debug", "info", "warn", "error"};
  for (int i = 0; i < 4; i++)
    if (strcmp(level, names[i]) == 0)
      return i;
  return 1;
}

void sb_log_set_json(bool json) { G.json = json; }
void sb_log_set_min_level(const char *level) { G.min_level = level_rank(level); }

void sb_log_redact(const char *secret) {
  if (secret == NULL || strlen(secret) < REDACT_MIN_LEN)
    return;
  for (size_t i = 0; i < G.n_secrets; i++)
    if (strcmp(G.secrets[i], secret) == 0)
      return;
  char **grown = realloc(G.secrets, (G.n_secrets + 1) * sizeof *grown);
  char *copy = strdup(secret);
  if (grown == NULL || copy == NULL) {
    free(copy);
    if (grown != NULL)
      G.secrets = grown;
    return;
  }
  G.secrets = grown;
  G.secrets[G.n_secrets++] = copy;
}

/* Replaces every occurrence of every registered secret, one secret after another (a mask
 * the first leaves is text the next is looked for in). The scan resumes after each mask, so a
 * secret that is itself part of the mask (say "redact") cannot make it loop. */
static void scrub(sb_log_line *line) {
  static const char mask[] = "[redacted]";
  for (size_t i = 0; i < G.n_secrets; i++) {
    const char *secret = G.secrets[i];
    size_t sl = strlen(secret);
    if (sl == 0 || memmem(line->data, line->len, secret, sl) == NULL)
      continue;
    sb_log_line out;
    sb_log_line_init(&out);
    const char *from = line->data, *end = line->data + line->len, *hit;
    while ((hit = memmem(from, (size_t)(end - from), secret, sl)) != NULL) {
      sb_log_line_put(&out, from, (size_t)(hit - from));
      sb_log_line_put(&out, mask, sizeof mask - 1);
      from = hit + sl;
    }
    sb_log_line_put(&out, from, (size_t)(end - from));
    bool inline_out = out.data == out.inline_bytes;
    sb_log_line_free(line);
    *line = out;
    if (inline_out)
      line->data = line->inline_bytes; /* the bytes were copied with the struct: point at them */
  }
}

size_t sb_log_find_secret(const char *text, size_t n, size_t from, size_t *len) {
  size_t best = n;
  *len = 0;
  for (size_t i = 0; i < G.n_secrets && from < n; i++) {
    size_t sl = strlen(G.secrets[i]);
    const char *hit = memmem(text + from, n - from, G.secrets[i], sl);
    if (hit != NULL && (size_t)(hit - text) < best) {
      best = (size_t)(hit - text);
      *len = sl;
    }
  }
  return best;
}

bool sb_log_enabled(const char *level) { return level_rank(level) >= G.min_level; }

/* Is stderr systemd's journal? systemd sets JOURNAL_STREAM to "DEV:INODE" of the stream it
 * connected; a child that inherited the variable but writes elsewhere must not match.
 * Decided once: stderr does not change under a running process. */
static bool stderr_is_journal(void) {
  static int known = -1;
  if (known >= 0)
    return known == 1;
  known = 0;
  const char *js = getenv("JOURNAL_STREAM");
  unsigned long long dev = 0, ino = 0;
  struct stat st;
  if (js != NULL && sscanf(js, "%llu:%llu", &dev, &ino) == 2 && fstat(2, &st) == 0 &&
      (unsigned long long)st.st_dev == dev && (unsigned long long)st.st_ino == ino)
    known = 1;
  return known == 1;
}

/* All of a line in one write(2), on fd 2 (stderr, unbuffered: nothing of stdio's waits before
 * it); a short write is finished, an interrupted one retried, a failing one dropped. errno is
 * the caller's as it was. */
static void write_line(const char *p, size_t n) {
  int saved = errno;
  while (n > 0) {
    ssize_t w = write(STDERR_FILENO, p, n);
    if (w < 0 && errno == EINTR)
      continue;
    if (w <= 0)
      break;
    p += w;
    n -= (size_t)w;
  }
  errno = saved;
}

/* Info and debug lines held for one write (sb_log_hold): sandboxd writes one per request, and
 * each write(2) into its stderr pipe (journald's, a harness's) woke the reader, one wakeup per
 * line on both sides (issue 43: ~6 % of sandboxd's CPU per walled `true`). At most HELD_MAX
 * bytes of whole lines, in order: PIPE_BUF, so that a write of them is atomic on a pipe (no
 * other writer's line lands inside) as each single line's was. A warn or error line writes what
 * is held and then itself at once; so does a line longer than the buffer. */
enum { HELD_MAX = 4096 };

static struct {
  unsigned ms;       /* 0: every line written at once */
  sb_log_due_fn due; /* arms the caller's timer: sb_log_flush within ms */
  size_t len;
  char bytes[HELD_MAX];
} H;

void sb_log_flush(void) {
  size_t n = H.len;
  H.len = 0;
  if (n > 0)
    write_line(H.bytes, n);
}

void sb_log_hold(unsigned ms, sb_log_due_fn due) {
  static bool flushed_at_exit;
  sb_log_flush();
  H.ms = due != NULL ? ms : 0;
  H.due = due;
  if (H.ms > 0 && !flushed_at_exit) /* an exit() without the engine's shutdown loses nothing */
    flushed_at_exit = atexit(sb_log_flush) == 0;
}

static void emit(const char *level, const char *p, size_t n) {
  if (H.ms == 0 || level_rank(level) > 1 || n > HELD_MAX) {
    sb_log_flush();
    write_line(p, n);
    return;
  }
  if (H.len + n > HELD_MAX)
    sb_log_flush();
  bool first = H.len == 0;
  memcpy(H.bytes + H.len, p, n);
  H.len += n;
  if (first)
    H.due(H.ms);
}

void sb_log_write(const char *level, const char *event, const sb_log_field *fields, size_t n) {
  if (!sb_log_enabled(level))
    return;
  struct timespec now;
  clock_gettime(CLOCK_REALTIME, &now);
  sb_log_line line;
  sb_log_line_init(&line);
  sb_log_line_style style = {.json = G.json, .journal = stderr_is_journal()};
  sb_log_line_format(&line, style, level, event, fields, n, now.tv_sec, now.tv_nsec / 1000);
  scrub(&line);
  emit(level, line.data, line.len);
  sb_log_line_free(&line);
}

void sb_log_error_text(const char *where, const char *text) {
  sb_log_field f[] = {{"where", where, false}, {"error", text ? text : "(no message)", false}};
  sb_log_write("error", "lua.error", f, 2);
}
