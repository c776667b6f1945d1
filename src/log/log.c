/* Structured logging (see log.h). Knows nothing of Lua: the Lua face is log_lua.c. */
#include "log.h"

#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <sys/stat.h>
#include <sys/time.h>

enum { REDACT_MIN_LEN = 6 };

static struct {
  bool json;
  int min_level;
  char **secrets; /* owned copies */
  size_t n_secrets;
} G = {false, 1, NULL, 0};

typedef struct {
  char *data;
  size_t len, cap;
} strbuf;

static void sb_put(strbuf *b, const char *s, size_t n) {
  if (n > SIZE_MAX / 4 - b->len)
    return; /* absurd sizes: drop, never wrap */
  size_t need = b->len + n + 1;
  if (need > b->cap) {
    size_t cap = b->cap ? b->cap : 256;
    while (cap < need)
      cap *= 2;
    char *grown = realloc(b->data, cap);
    if (grown == NULL)
      return; /* drop the rest of the line rather than crash the loop */
    b->data = grown;
    b->cap = cap;
  }
  if (b->data == NULL)
    return;
  memcpy(b->data + b->len, s, n);
  b->len += n;
  b->data[b->len] = '\0';
}

static void sb_puts(strbuf *b, const char *s) { sb_put(b, s, strlen(s)); }

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

/* JSON string escaping; also used for text mode so a line never breaks. */
static void put_escaped(strbuf *b, const char *s) {
  for (const unsigned char *p = (const unsigned char *)s; *p; p++) {
    char tmp[8];
    switch (*p) {
    case '"': sb_puts(b, "\\\""); break;
    case '\\': sb_puts(b, "\\\\"); break;
    case '\n': sb_puts(b, "\\n"); break;
    case '\r': sb_puts(b, "\\r"); break;
    case '\t': sb_puts(b, "\\t"); break;
    default:
      if (*p < 0x20) {
        snprintf(tmp, sizeof tmp, "\\u%04x", *p);
        sb_puts(b, tmp);
      } else {
        sb_put(b, (const char *)p, 1);
      }
    }
  }
}

static bool needs_quotes(const char *s) {
  if (*s == '\0')
    return true;
  for (; *s; s++)
    if (*s == ' ' || *s == '"' || *s == '=' || (unsigned char)*s < 0x20)
      return true;
  return false;
}

static void put_timestamp(strbuf *b) {
  struct timeval tv;
  gettimeofday(&tv, NULL);
  struct tm tm;
  gmtime_r(&tv.tv_sec, &tm);
  char ts[40];
  size_t n = strftime(ts, sizeof ts, "%Y-%m-%dT%H:%M:%S", &tm);
  snprintf(ts + n, sizeof ts - n, ".%03dZ", (int)(tv.tv_usec / 1000));
  sb_puts(b, ts);
}

/* Replaces every occurrence of every registered secret. The scan resumes after each mask, so
 * a secret that is itself part of the mask (say "redact") cannot make it loop. */
static void scrub(strbuf *b) {
  static const char mask[] = "[redacted]";
  for (size_t i = 0; i < G.n_secrets && b->data != NULL; i++) {
    const char *secret = G.secrets[i];
    size_t sl = strlen(secret);
    if (sl == 0 || strstr(b->data, secret) == NULL)
      continue;
    strbuf out = {0};
    const char *from = b->data, *hit;
    while ((hit = strstr(from, secret)) != NULL) {
      sb_put(&out, from, (size_t)(hit - from));
      sb_puts(&out, mask);
      from = hit + sl;
    }
    sb_puts(&out, from);
    free(b->data);
    *b = out;
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

/* The sd-daemon(3) priority prefix journald reads: "<3>" error … "<7>" debug. */
static const char *journal_prefix(const char *level) {
  static const char *prefixes[] = {"<7>", "<6>", "<4>", "<3>"};
  return prefixes[level_rank(level)];
}

void sb_log_write(const char *level, const char *event, const sb_log_field *fields, size_t n) {
  if (!sb_log_enabled(level))
    return;
  strbuf b = {0};
  /* On the journal each line carries its priority; the journal keeps its own timestamps. */
  bool journal = stderr_is_journal();
  if (journal)
    sb_puts(&b, journal_prefix(level));
  if (G.json) {
    sb_puts(&b, "{\"ts\":\"");
    put_timestamp(&b);
    sb_puts(&b, "\",\"level\":\"");
    put_escaped(&b, level);
    sb_puts(&b, "\",\"event\":\"");
    put_escaped(&b, event);
    sb_puts(&b, "\"");
    for (size_t i = 0; i < n; i++) {
      sb_puts(&b, ",\"");
      put_escaped(&b, fields[i].key);
      sb_puts(&b, "\":");
      if (fields[i].raw) {
        sb_puts(&b, fields[i].value);
      } else {
        sb_puts(&b, "\"");
        put_escaped(&b, fields[i].value);
        sb_puts(&b, "\"");
      }
    }
    sb_puts(&b, "}\n");
  } else {
    if (!journal) {
      put_timestamp(&b);
      sb_puts(&b, " ");
    }
    sb_puts(&b, level);
    sb_puts(&b, " ");
    put_escaped(&b, event);
    for (size_t i = 0; i < n; i++) {
      sb_puts(&b, " ");
      put_escaped(&b, fields[i].key);
      sb_puts(&b, "=");
      bool quote = !fields[i].raw && needs_quotes(fields[i].value);
      if (quote)
        sb_puts(&b, "\"");
      put_escaped(&b, fields[i].value);
      if (quote)
        sb_puts(&b, "\"");
    }
    sb_puts(&b, "\n");
  }
  scrub(&b);
  if (b.data != NULL) {
    fwrite(b.data, 1, b.len, stderr);
    fflush(stderr);
  }
  free(b.data);
}

void sb_log_error_text(const char *where, const char *text) {
  sb_log_field f[] = {{"where", where, false}, {"error", text ? text : "(no message)", false}};
  sb_log_write("error", "lua.error", f, 2);
}
