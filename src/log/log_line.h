/* The bytes of one log line (log.c writes them): made by hand into one buffer, without stdio —
 * sandboxd writes a line per request and printf's machinery was 7 % of its CPU (issue 43). The
 * bytes are those of the printf/strftime formatter this replaced (tests/c/test_log_line.c
 * keeps that formatter and compares). The wall-clock time is an argument, so a test can give
 * any. */
#ifndef SB_LOG_LINE_H
#define SB_LOG_LINE_H

#include "log.h"

#include <stdbool.h>
#include <stddef.h>
#include <time.h>

/* A line's buffer: the inline bytes first (a request line fits), the heap past them. */
typedef struct {
  char *data;
  size_t len, cap;
  char inline_bytes[1024];
} sb_log_line;

void sb_log_line_init(sb_log_line *line);
void sb_log_line_free(sb_log_line *line);
void sb_log_line_put(sb_log_line *line, const char *s, size_t n);

typedef struct {
  bool json;    /* JSON document, else `ts level event key=value …` */
  bool journal; /* stderr is systemd's journal: a "<N>" priority first, no timestamp in text */
} sb_log_line_style;

/* Appends the whole line, its '\n' included, as of the wall-clock time sec.usec. */
void sb_log_line_format(sb_log_line *line, sb_log_line_style style, const char *level,
                        const char *event, const sb_log_field *fields, size_t n, time_t sec,
                        long usec);

/* "YYYY-MM-DDTHH:MM:SS.mmmZ" (UTC) into out, its length returned (the text of strftime's
 * "%Y-%m-%dT%H:%M:%S" then ".%03dZ"). The seconds' text is made once per second (per thread). */
size_t sb_log_timestamp_text(char out[48], time_t sec, long usec);

#endif
