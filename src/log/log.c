/* Structured logging (see log.h) and its Lua face: core.log, core.log_format, core.log_redact. */
#include "log.h"
#include "../engine/engine.h"

#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
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

static void scrub(strbuf *b) {
  static const char mask[] = "[redacted]";
  for (size_t i = 0; i < G.n_secrets; i++) {
    const char *secret = G.secrets[i];
    size_t sl = strlen(secret);
    char *hit;
    while (b->data && (hit = strstr(b->data, secret)) != NULL) {
      size_t at = (size_t)(hit - b->data);
      strbuf out = {0};
      sb_put(&out, b->data, at);
      sb_puts(&out, mask);
      sb_puts(&out, b->data + at + sl);
      free(b->data);
      *b = out;
    }
  }
}

bool sb_log_enabled(const char *level) { return level_rank(level) >= G.min_level; }

void sb_log_write(const char *level, const char *event, const sb_log_field *fields, size_t n) {
  if (!sb_log_enabled(level))
    return;
  strbuf b = {0};
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
    put_timestamp(&b);
    sb_puts(&b, " ");
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

/* ---- Lua face -------------------------------------------------------------------------------- */

static int cmp_keys(const void *a, const void *b) {
  return strcmp(((const sb_log_field *)a)->key, ((const sb_log_field *)b)->key);
}

/* core.log(level, event [, fields]): fields are sorted by key so lines compare stably. */
static int l_log(lua_State *L) {
  const char *level = luaL_checkstring(L, 1);
  const char *event = luaL_checkstring(L, 2);
  if (!sb_log_enabled(level))
    return 0; /* a filtered line costs no formatting */
  enum { MAX_FIELDS = 64 };
  sb_log_field fields[MAX_FIELDS];
  size_t n = 0;
  int base = lua_gettop(L);
  if (lua_istable(L, 3)) {
    luaL_checkstack(L, 2 * MAX_FIELDS + 8, "log fields");
    lua_pushnil(L);
    while (n < MAX_FIELDS && lua_next(L, 3) != 0) {
      if (lua_type(L, -2) != LUA_TSTRING) {
        lua_pop(L, 1);
        continue;
      }
      int t = lua_type(L, -1);
      bool raw = t == LUA_TNUMBER || t == LUA_TBOOLEAN;
      lua_pushvalue(L, -2);        /* key copy, anchored on the stack */
      luaL_tolstring(L, -2, NULL); /* value text, anchored on the stack */
      fields[n++] = (sb_log_field){lua_tostring(L, -2), lua_tostring(L, -1), raw};
      lua_rotate(L, -4, 2); /* [key, value, copy, text] -> [copy, text, key, value] */
      lua_pop(L, 1);        /* the key stays for lua_next */
    }
  }
  qsort(fields, n, sizeof *fields, cmp_keys);
  sb_log_write(level, event, fields, n);
  lua_settop(L, base);
  return 0;
}

static int l_log_format(lua_State *L) {
  const char *format = luaL_checkstring(L, 1);
  luaL_argcheck(L, strcmp(format, "json") == 0 || strcmp(format, "text") == 0, 1,
                "\"json\" or \"text\" expected");
  sb_log_set_json(strcmp(format, "json") == 0);
  if (lua_isstring(L, 2))
    sb_log_set_min_level(lua_tostring(L, 2));
  return 0;
}

static int l_log_redact(lua_State *L) {
  sb_log_redact(luaL_checkstring(L, 1));
  return 0;
}

/* core.log_scrub(text) → text with every registered secret replaced by "[redacted]": the same
 * second line of defence for what Lua writes elsewhere (an agent run's transcript). Length-aware,
 * so bytes after a NUL are scrubbed too. */
static int l_log_scrub(lua_State *L) {
  size_t n;
  const char *text = luaL_checklstring(L, 1, &n);
  bool any = false;
  for (size_t i = 0; i < G.n_secrets && !any; i++)
    any = memmem(text, n, G.secrets[i], strlen(G.secrets[i])) != NULL;
  if (!any) {
    lua_settop(L, 1);
    return 1;
  }
  luaL_Buffer b;
  luaL_buffinit(L, &b);
  size_t at = 0;
  while (at < n) {
    size_t best = n, best_len = 0;
    for (size_t i = 0; i < G.n_secrets; i++) {
      size_t sl = strlen(G.secrets[i]);
      const char *hit = memmem(text + at, n - at, G.secrets[i], sl);
      if (hit != NULL && (size_t)(hit - text) < best) {
        best = (size_t)(hit - text);
        best_len = sl;
      }
    }
    luaL_addlstring(&b, text + at, best - at);
    if (best == n)
      break;
    luaL_addstring(&b, "[redacted]");
    at = best + best_len;
  }
  luaL_pushresult(&b);
  return 1;
}

int sb_log_open(lua_State *L) {
  lua_pushcfunction(L, l_log_scrub);
  lua_setfield(L, -2, "log_scrub");
  lua_pushcfunction(L, l_log);
  lua_setfield(L, -2, "log");
  lua_pushcfunction(L, l_log_format);
  lua_setfield(L, -2, "log_format");
  lua_pushcfunction(L, l_log_redact);
  lua_setfield(L, -2, "log_redact");
  return 0;
}
