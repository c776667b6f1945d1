/* Structured logging: one line per event on stderr, as `key=value` text or as JSON lines.
 * Secrets never reach a log call by construction; as a second line of defence every line is
 * scrubbed of the strings registered with sb_log_redact() before it is written. */
#ifndef SB_LOG_H
#define SB_LOG_H

#include <stdbool.h>
#include <stddef.h>

typedef struct {
  const char *key;
  const char *value; /* a string; numbers are formatted by the caller */
  bool raw;          /* value is a JSON number/boolean literal (unquoted in JSON) */
} sb_log_field;

void sb_log_set_json(bool json);
void sb_log_set_min_level(const char *level); /* "debug" | "info" | "warn" | "error" */
void sb_log_redact(const char *secret);        /* copies it; empty and short strings ignored */
/* The earliest registered secret in text[from..n): its offset (n when there is none) and its
 * length in *len. Length-aware (a NUL in text is a byte like any other). */
size_t sb_log_find_secret(const char *text, size_t n, size_t from, size_t *len);
bool sb_log_enabled(const char *level);
/* v as "%lld" writes it, into buf (NUL-terminated), its length returned: for a caller's integer
 * fields without printf. */
size_t sb_log_int_text(char buf[24], long long v);
void sb_log_write(const char *level, const char *event, const sb_log_field *fields, size_t n);
/* Holding lines (log.c says why): from now, info and debug lines are kept, whole and in order,
 * and written together — when `due`'s timer calls sb_log_flush (armed with `ms` by the first
 * line held), when 4 KiB of them are kept, before a warn or error line, at exit(). ms 0 (or due
 * NULL) writes what is held and every line from then at once. Lines held when the process dies
 * of a signal are lost: at most ms of them. The held lines are the loop thread's: while holding
 * is on, no other thread may call sb_log_write (none does: the spawning thread and libuv's pool
 * log nothing; a thread that must would need its lines written at once, not held). */
typedef void (*sb_log_due_fn)(unsigned ms);
void sb_log_hold(unsigned ms, sb_log_due_fn due);
void sb_log_flush(void);
/* An error with a location/traceback text, from the protected-call path. */
void sb_log_error_text(const char *where, const char *text);

#endif
