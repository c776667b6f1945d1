/* The exec lane's reader of an /exec body (exec_body.h): a strict subset of JSON, read as
 * lua-cjson 2.1 reads it, or "not mine". */
#include "exec_body.h"

#include <stdint.h>
#include <stdlib.h>
#include <string.h>

typedef struct {
  const char *p, *end;
  char *out; /* the next decoded byte's place in the body's buffer */
  sb_exec_body *b;
  size_t cap_env;
} reader;

/* JSON's whitespace: what cjson skips (anything else between tokens: not mine). */
static void skip_space(reader *r) {
  while (r->p < r->end && (*r->p == ' ' || *r->p == '\t' || *r->p == '\n' || *r->p == '\r'))
    r->p++;
}

static bool next_is(reader *r, char c) {
  skip_space(r);
  if (r->p < r->end && *r->p == c) {
    r->p++;
    return true;
  }
  return false;
}

static int hex4(const char *p) {
  int v = 0;
  for (int i = 0; i < 4; i++) {
    char c = p[i];
    int d = c >= '0' && c <= '9'   ? c - '0'
            : c >= 'a' && c <= 'f' ? c - 'a' + 10
            : c >= 'A' && c <= 'F' ? c - 'A' + 10
                                   : -1;
    if (d < 0)
      return -1;
    v = v << 4 | d;
  }
  return v;
}

/* cjson's json_append_unicode_escape: r->p at the backslash of \uXXXX; a high surrogate must be
 * followed by a \u low one; a lone low one, or a high one alone, is invalid (cjson: an error). */
static bool unicode_escape(reader *r) {
  if (r->end - r->p < 6)
    return false;
  int cp = hex4(r->p + 2);
  if (cp < 0)
    return false;
  r->p += 6;
  if ((cp & 0xF800) == 0xD800) {
    if (cp & 0x400 || r->end - r->p < 6 || r->p[0] != '\\' || r->p[1] != 'u')
      return false;
    int low = hex4(r->p + 2);
    if (low < 0 || (low & 0xFC00) != 0xDC00)
      return false;
    r->p += 6;
    cp = (((cp & 0x3FF) << 10) | (low & 0x3FF)) + 0x10000;
  }
  unsigned char *o = (unsigned char *)r->out;
  if (cp < 0x80) {
    *o++ = (unsigned char)cp;
  } else if (cp < 0x800) {
    *o++ = (unsigned char)(0xC0 | cp >> 6);
    *o++ = (unsigned char)(0x80 | (cp & 0x3F));
  } else if (cp < 0x10000) {
    *o++ = (unsigned char)(0xE0 | cp >> 12);
    *o++ = (unsigned char)(0x80 | ((cp >> 6) & 0x3F));
    *o++ = (unsigned char)(0x80 | (cp & 0x3F));
  } else {
    *o++ = (unsigned char)(0xF0 | cp >> 18);
    *o++ = (unsigned char)(0x80 | ((cp >> 12) & 0x3F));
    *o++ = (unsigned char)(0x80 | ((cp >> 6) & 0x3F));
    *o++ = (unsigned char)(0x80 | (cp & 0x3F));
  }
  r->out = (char *)o;
  return true;
}

/* A string at r->p (after whitespace), decoded into the buffer and NUL-terminated. Raw bytes go
 * through as they are (cjson checks neither UTF-8 nor control bytes), except a raw NUL: cjson
 * reads its input as a C string, so a NUL ends it there — not mine. A decoded string is at most
 * its literal's length less its quotes, so the buffer (the body's length) always has room. */
static bool string(reader *r, const char **s, size_t *len) {
  if (!next_is(r, '"'))
    return false;
  char *start = r->out;
  for (;;) {
    if (r->p >= r->end || *r->p == '\0')
      return false;
    char c = *r->p;
    if (c == '"')
      break;
    if (c != '\\') {
      *r->out++ = c;
      r->p++;
      continue;
    }
    if (r->end - r->p < 2)
      return false;
    char e = r->p[1];
    if (e == 'u') {
      if (!unicode_escape(r))
        return false;
      continue;
    }
    char to = e == '"' ? '"' : e == '\\' ? '\\' : e == '/' ? '/' : e == 'b' ? '\b'
            : e == 'f' ? '\f' : e == 'n' ? '\n' : e == 'r' ? '\r' : e == 't' ? '\t' : 0;
    if (to == 0)
      return false;
    *r->out++ = to;
    r->p += 2;
  }
  r->p++; /* the closing quote */
  *len = (size_t)(r->out - start);
  *r->out++ = '\0';
  *s = start;
  return true;
}

/* A number in JSON's own grammar (no '+', no leading zero, digits on both sides of the point),
 * converted by strtod as cjson converts it (correctly rounded; past the range, ±inf as cjson). */
static bool number(reader *r, double *v) {
  skip_space(r);
  const char *p = r->p, *e = r->end;
  if (p < e && *p == '-')
    p++;
  if (p >= e || *p < '0' || *p > '9')
    return false;
  if (*p == '0')
    p++;
  else
    while (p < e && *p >= '0' && *p <= '9')
      p++;
  if (p < e && *p == '.') {
    p++;
    if (p >= e || *p < '0' || *p > '9')
      return false;
    while (p < e && *p >= '0' && *p <= '9')
      p++;
  }
  if (p < e && (*p == 'e' || *p == 'E')) {
    p++;
    if (p < e && (*p == '+' || *p == '-'))
      p++;
    if (p >= e || *p < '0' || *p > '9')
      return false;
    while (p < e && *p >= '0' && *p <= '9')
      p++;
  }
  /* strtod wants a C string: the number's text copied (the body itself is not terminated); the
   * process never calls setlocale, so its decimal point is C's "." as JSON's */
  char text[64];
  size_t n = (size_t)(p - r->p);
  if (n >= sizeof text)
    return false; /* a number this long is not a budget anyone sends: the Lua path's */
  memcpy(text, r->p, n);
  text[n] = '\0';
  *v = strtod(text, NULL);
  r->p = p;
  return true;
}

static bool env_add(reader *r, const char *name, size_t name_len, const char *value,
                    size_t value_len) {
  sb_exec_body *b = r->b;
  if (b->n_env == r->cap_env) {
    size_t cap = r->cap_env ? r->cap_env * 2 : 8;
    sb_exec_env_pair *grown = realloc(b->env, cap * sizeof *grown);
    if (grown == NULL)
      return false;
    b->env = grown;
    r->cap_env = cap;
  }
  b->env[b->n_env++] = (sb_exec_env_pair){name, value, name_len, value_len};
  return true;
}

static int pair_order(const void *a, const void *b) {
  const sb_exec_env_pair *x = a, *y = b;
  size_t n = x->name_len < y->name_len ? x->name_len : y->name_len;
  int c = memcmp(x->name, y->name, n);
  if (c != 0)
    return c;
  return x->name_len < y->name_len ? -1 : x->name_len > y->name_len;
}

/* env: an object of strings, or an empty array (cjson: an empty table too). Sorted, so that a
 * name given twice (cjson keeps the last: not mine) is found in O(n log n), not O(n²). */
static bool env(reader *r) {
  r->b->has_env = true;
  if (next_is(r, '['))
    return next_is(r, ']');
  if (!next_is(r, '{'))
    return false;
  if (!next_is(r, '}')) {
    do {
      const char *name, *value;
      size_t name_len, value_len;
      if (!string(r, &name, &name_len) || !next_is(r, ':') || !string(r, &value, &value_len) ||
          !env_add(r, name, name_len, value, value_len))
        return false;
    } while (next_is(r, ','));
    if (!next_is(r, '}'))
      return false;
  }
  sb_exec_body *b = r->b;
  if (b->n_env > 1)
    qsort(b->env, b->n_env, sizeof *b->env, pair_order);
  for (size_t i = 1; i < b->n_env; i++)
    if (pair_order(&b->env[i - 1], &b->env[i]) == 0)
      return false;
  return true;
}

static bool key_is(const char *k, size_t n, const char *word) {
  return n == strlen(word) && memcmp(k, word, n) == 0;
}

/* One member of the top object: a known key, seen for the first time, with its type. */
static bool member(reader *r) {
  sb_exec_body *b = r->b;
  const char *k;
  size_t kn;
  if (!string(r, &k, &kn) || !next_is(r, ':'))
    return false;
  if (key_is(k, kn, "command"))
    return b->command == NULL && string(r, &b->command, &b->command_len);
  if (key_is(k, kn, "network"))
    return b->network == NULL && string(r, &b->network, &b->network_len);
  if (key_is(k, kn, "timeoutMs")) {
    if (b->has_timeout)
      return false;
    b->has_timeout = true;
    return number(r, &b->timeout_ms);
  }
  if (key_is(k, kn, "env"))
    return !b->has_env && env(r);
  return false;
}

bool sb_exec_body_read(const char *body, size_t n, sb_exec_body *out) {
  memset(out, 0, sizeof *out);
  out->buf = malloc(n + 1);
  if (out->buf == NULL)
    return false;
  reader r = {.p = body, .end = body + n, .out = out->buf, .b = out};
  if (!next_is(&r, '{'))
    return false;
  if (!next_is(&r, '}')) {
    do
      if (!member(&r))
        return false;
    while (next_is(&r, ','));
    if (!next_is(&r, '}'))
      return false;
  }
  skip_space(&r);
  return r.p == r.end;
}

const sb_exec_env_pair *sb_exec_body_env(const sb_exec_body *b, const char *name, size_t name_len) {
  if (b->n_env == 0)
    return NULL;
  sb_exec_env_pair key = {.name = name, .name_len = name_len};
  return bsearch(&key, b->env, b->n_env, sizeof *b->env, pair_order);
}

void sb_exec_body_free(sb_exec_body *b) {
  free(b->buf);
  free(b->env);
  b->buf = NULL;
  b->env = NULL;
  b->n_env = 0;
}
