/* core.http.request: one HTTP exchange as a yielding call (see docs/engine.md).
 *
 * The calling task yields until the transfer ends; it is then resumed with
 * `status, headers, body` or `nil, {kind, message}` (kind timeout | aborted | transport; a
 * transport failure where no connection was made — refused, unresolvable — also carries
 * not_sent = true: nothing of the request left this process, so nothing ran).
 * The deadline is CURLOPT_TIMEOUT_MS, so it covers connecting, the headers and a streamed
 * body alike: a peer that heartbeats forever is abandoned at the deadline. Failure messages
 * name the peer's host:port and libcurl's text, never a header value or the body, since
 * bearer tokens ride in both. The libcurl/libuv plumbing is in client_multi.c.
 * public_only = true refuses, at the moment of connecting, every address that is not the
 * public internet (loopback, private, link-local, …: public_address below), whatever name
 * resolved to it and at every hop — the check is on the address the socket would connect to,
 * so a name that resolves differently the second time changes nothing (web_fetch from the
 * bot, docs/agent.md). Such a failure is kind "refused_address", not_sent. */
#include "client_multi.h"
#include "http.h"
#include "relay.h"
#include "../engine/engine.h"

#include <ctype.h>
#include <math.h>
#include <stddef.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>
#include <arpa/inet.h>
#include <netinet/in.h>
#include <fcntl.h>
#include <sys/socket.h>
#include <unistd.h>

enum {
  DEFAULT_MAX_BODY = 16 << 20,  /* bytes */
  MAX_HEAD_BYTES = 256 << 10,   /* bytes of response head we keep; past it: transport */
  MAX_DEADLINE_MS = 0x7fffffff, /* CURLOPT_TIMEOUT_MS is a long; keep it portable */
};

typedef struct {
  char *data; /* owned */
  size_t len, cap;
} buf;

static bool buf_put(buf *b, const char *s, size_t n) {
  if (b->len + n > b->cap) {
    size_t cap = b->cap ? b->cap : 1024;
    while (cap < b->len + n)
      cap *= 2;
    char *grown = realloc(b->data, cap);
    if (grown == NULL)
      return false;
    b->data = grown;
    b->cap = cap;
  }
  memcpy(b->data + b->len, s, n);
  b->len += n;
  return true;
}

typedef struct {
  sb_curl_job job;          /* first: the job's done/dispose receive it */
  lua_State *task;          /* the yielded caller */
  sb_abort_listener on_abort;
  sb_abort *aborted_by;     /* the signal that ended the request, or NULL */
  int signal_ref;           /* registry refs keeping the signal, on_chunk and the request */
  int on_chunk_ref;         /* body (libcurl reads it in place) alive; LUA_NOREF if absent */
  int body_ref;
  struct curl_slist *headers; /* owned */
  size_t max_body;          /* bytes */
  long deadline_ms;         /* 0: none */
  char *unix_socket;        /* owned copy for messages, or NULL */
  int netns_fd;             /* opts.netns: the network namespace the socket is made in; -1 */
  bool body_started;        /* header lines after the body are trailers: ignored */
  bool public_only;         /* refuse non-public addresses when connecting */
  char refused[INET6_ADDRSTRLEN]; /* the address refused, or "" */
  bool over_body, over_head, out_of_memory;
  buf head, body;
  char errbuf[CURL_ERROR_SIZE];
} request;

/* ---- libcurl callbacks (they run inside curl_multi_socket_action) ---------------------- */

static size_t on_header(char *data, size_t size, size_t n, void *ud) {
  request *r = ud;
  size_t len = size * n;
  if (r->body_started)
    return len;
  if (len >= 5 && memcmp(data, "HTTP/", 5) == 0)
    r->head.len = 0; /* a new response (after a 1xx): only the final one counts */
  if (r->head.len + len > MAX_HEAD_BYTES) {
    r->over_head = true;
    return 0;
  }
  if (!buf_put(&r->head, data, len)) {
    r->out_of_memory = true;
    return 0;
  }
  return len;
}

static size_t on_body(char *data, size_t size, size_t n, void *ud) {
  request *r = ud;
  size_t len = size * n;
  r->body_started = true;
  if (r->aborted_by != NULL)
    return len == 0 ? 1 : 0; /* stop reading; the cancel completes the request */
  if (len > r->max_body - r->body.len) {
    r->over_body = true;
    return len == 0 ? 1 : 0;
  }
  if (!buf_put(&r->body, data, len)) {
    r->out_of_memory = true;
    return len == 0 ? 1 : 0;
  }
  if (r->on_chunk_ref != LUA_NOREF) {
    lua_State *L = sb_main_state();
    lua_rawgeti(L, LUA_REGISTRYINDEX, r->on_chunk_ref);
    lua_pushlstring(L, data, len);
    sb_pcall(L, 1, "http.request on_chunk");
    if (r->aborted_by != NULL) /* on_chunk aborted our own signal */
      return len == 0 ? 1 : 0;
  }
  return len;
}

/* Sockets are created close-on-exec, so no child process ever inherits a connection (a
 * child holding our socket would also keep a dead peer's connection looking alive). */
static bool in_v4(uint32_t addr, uint32_t net, int bits) {
  uint32_t mask = bits == 0 ? 0 : 0xffffffffu << (32 - bits);
  return (addr & mask) == net;
}

/* The IPv4 ranges that are not the public internet: this network, private networks,
 * carrier-grade NAT, loopback, link-local (a cloud's metadata service), IETF assignments,
 * multicast and reserved. */
static bool public_v4(uint32_t a) {
  return !(in_v4(a, 0x00000000u, 8) || in_v4(a, 0x0a000000u, 8) || in_v4(a, 0x64400000u, 10) ||
           in_v4(a, 0x7f000000u, 8) || in_v4(a, 0xa9fe0000u, 16) || in_v4(a, 0xac100000u, 12) ||
           in_v4(a, 0xc0000000u, 24) || in_v4(a, 0xc0a80000u, 16) || in_v4(a, 0xe0000000u, 4) ||
           in_v4(a, 0xf0000000u, 4));
}

/* IPv6: unspecified, loopback and the IPv4-compatible range, link-local, site-local, unique
 * local and multicast are refused; an IPv4-mapped or NAT64 address is judged by its IPv4. */
static bool public_v6(const unsigned char *b) {
  static const unsigned char mapped[12] = {0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0xff, 0xff};
  static const unsigned char nat64[12] = {0, 0x64, 0xff, 0x9b, 0, 0, 0, 0, 0, 0, 0, 0};
  static const unsigned char zero[12] = {0};
  uint32_t v4 = (uint32_t)b[12] << 24 | (uint32_t)b[13] << 16 | (uint32_t)b[14] << 8 | b[15];
  if (memcmp(b, mapped, 12) == 0 || memcmp(b, nat64, 12) == 0)
    return public_v4(v4);
  if (memcmp(b, zero, 12) == 0)
    return false;
  if (b[0] == 0xfe && (b[1] & 0xc0) == 0x80) /* fe80::/10 link-local */
    return false;
  if (b[0] == 0xfe && (b[1] & 0xc0) == 0xc0) /* fec0::/10 site-local */
    return false;
  if ((b[0] & 0xfe) == 0xfc) /* fc00::/7 unique local */
    return false;
  return b[0] != 0xff; /* ff00::/8 multicast */
}

/* Whether the address is the public internet; its text goes to out when it is not. */
static bool public_address(const struct sockaddr *sa, char *out, size_t out_len) {
  if (sa->sa_family == AF_INET) {
    const struct sockaddr_in *in = (const struct sockaddr_in *)sa;
    if (public_v4(ntohl(in->sin_addr.s_addr)))
      return true;
    inet_ntop(AF_INET, &in->sin_addr, out, (socklen_t)out_len);
    return false;
  }
  if (sa->sa_family == AF_INET6) {
    const struct sockaddr_in6 *in6 = (const struct sockaddr_in6 *)sa;
    if (public_v6(in6->sin6_addr.s6_addr))
      return true;
    inet_ntop(AF_INET6, &in6->sin6_addr, out, (socklen_t)out_len);
    return false;
  }
  snprintf(out, out_len, "family %d", sa->sa_family);
  return false;
}

static curl_socket_t open_socket(void *ud, curlsocktype purpose, struct curl_sockaddr *a) {
  request *r = ud;
  (void)purpose;
  if (r != NULL && r->public_only && !public_address(&a->addr, r->refused, sizeof r->refused))
    return CURL_SOCKET_BAD; /* libcurl tries the name's next address, if any */
  /* opts.netns (sandboxd's port proxy, docs/sandboxd.md "Ports"): the socket is made inside
   * that network namespace (relay.c) */
  int s = sb_socket_in_netns(r != NULL ? r->netns_fd : -1, a->family, a->socktype, a->protocol);
  return s < 0 ? CURL_SOCKET_BAD : s;
}

/* ---- completion -------------------------------------------------------------------------- */

static void request_free(request *r) {
  lua_State *L = sb_main_state();
  sb_abort_unlisten(&r->on_abort);
  luaL_unref(L, LUA_REGISTRYINDEX, r->signal_ref);
  luaL_unref(L, LUA_REGISTRYINDEX, r->on_chunk_ref);
  luaL_unref(L, LUA_REGISTRYINDEX, r->body_ref);
  curl_slist_free_all(r->headers);
  if (r->job.easy != NULL)
    curl_easy_cleanup(r->job.easy);
  free(r->unix_socket);
  if (r->netns_fd >= 0)
    close(r->netns_fd);
  free(r->head.data);
  free(r->body.data);
  free(r);
}

/* "host:port" of the request's URL (or "the URL" when it does not parse), plus the socket
 * path when the request went through one. Never the path, query or credentials. */
static void describe_peer(request *r, char *out, size_t out_len) {
  char *url = NULL, *host = NULL, *port = NULL;
  curl_easy_getinfo(r->job.easy, CURLINFO_EFFECTIVE_URL, &url);
  CURLU *u = curl_url();
  if (u != NULL && url != NULL && curl_url_set(u, CURLUPART_URL, url, 0) == CURLUE_OK) {
    curl_url_get(u, CURLUPART_HOST, &host, 0);
    curl_url_get(u, CURLUPART_PORT, &port, CURLU_DEFAULT_PORT);
  }
  int n = host != NULL ? snprintf(out, out_len, "%s:%s", host, port != NULL ? port : "?")
                       : snprintf(out, out_len, "the URL");
  if (r->unix_socket != NULL && n >= 0 && (size_t)n < out_len)
    snprintf(out + n, out_len - (size_t)n, " via %s", r->unix_socket);
  curl_free(host);
  curl_free(port);
  curl_url_cleanup(u);
}

static int push_failure(lua_State *T, request *r, CURLcode rc) {
  char peer[512], msg[CURL_ERROR_SIZE + 768];
  describe_peer(r, peer, sizeof peer);
  const char *detail = r->errbuf[0] != '\0' ? r->errbuf : curl_easy_strerror(rc);
  const char *kind = "transport";
  if (rc == CURLE_OPERATION_TIMEDOUT) {
    kind = "timeout";
    snprintf(msg, sizeof msg, "%s: no complete answer within the deadline of %ld ms (%s)", peer,
             r->deadline_ms, detail);
  } else if (r->over_body) {
    snprintf(msg, sizeof msg, "%s: response body over max_body (%zu bytes)", peer, r->max_body);
  } else if (r->over_head) {
    snprintf(msg, sizeof msg, "%s: response head over %d bytes", peer, MAX_HEAD_BYTES);
  } else if (r->out_of_memory) {
    snprintf(msg, sizeof msg, "%s: out of memory while reading the response", peer);
  } else if (r->refused[0] != '\0' && rc == CURLE_COULDNT_CONNECT) {
    kind = "refused_address";
    snprintf(msg, sizeof msg, "%s: refused to connect to %s: not a public address (loopback, "
             "private, link-local or reserved)", peer, r->refused);
  } else {
    snprintf(msg, sizeof msg, "%s: %s", peer, detail);
  }
  int n = sb_push_fail(T, kind, msg);
  if (rc == CURLE_COULDNT_CONNECT || rc == CURLE_COULDNT_RESOLVE_HOST ||
      rc == CURLE_COULDNT_RESOLVE_PROXY) {
    lua_pushboolean(T, 1);
    lua_setfield(T, -2, "not_sent");
  }
  return n;
}

/* Parses the kept response head into a table: lower-cased name → value, repeated names
 * joined with ", ", obsolete folded lines appended to the previous value. */
static void push_headers(lua_State *T, request *r) {
  lua_createtable(T, 0, 8);
  int t = lua_gettop(T);
  char *p = r->head.data, *end = p + r->head.len;
  bool first = true;
  const char *last_name = NULL;
  size_t last_len = 0;
  while (p < end) {
    char *eol = memchr(p, '\n', (size_t)(end - p));
    char *line_end = eol != NULL ? eol : end;
    char *next = eol != NULL ? eol + 1 : end;
    while (line_end > p && (line_end[-1] == '\r' || line_end[-1] == ' ' || line_end[-1] == '\t'))
      line_end--;
    if (first) { /* the status line */
      first = false;
      p = next;
      continue;
    }
    if (line_end == p) {
      p = next;
      continue;
    }
    if ((*p == ' ' || *p == '\t') && last_name != NULL) {
      while (p < line_end && (*p == ' ' || *p == '\t'))
        p++;
      lua_pushlstring(T, last_name, last_len);
      lua_pushvalue(T, -1);
      lua_rawget(T, t);
      lua_pushliteral(T, " ");
      lua_pushlstring(T, p, (size_t)(line_end - p));
      lua_concat(T, 3);
      lua_rawset(T, t);
      p = next;
      continue;
    }
    char *colon = memchr(p, ':', (size_t)(line_end - p));
    if (colon == NULL || colon == p) {
      p = next;
      continue;
    }
    for (char *c = p; c < colon; c++)
      *c = (char)tolower((unsigned char)*c);
    char *v = colon + 1;
    while (v < line_end && (*v == ' ' || *v == '\t'))
      v++;
    last_name = p;
    last_len = (size_t)(colon - p);
    lua_pushlstring(T, p, last_len);
    lua_pushvalue(T, -1);
    lua_rawget(T, t);
    if (lua_isnil(T, -1)) {
      lua_pop(T, 1);
      lua_pushlstring(T, v, (size_t)(line_end - v));
    } else {
      lua_pushliteral(T, ", ");
      lua_pushlstring(T, v, (size_t)(line_end - v));
      lua_concat(T, 3);
    }
    lua_rawset(T, t);
    p = next;
  }
}

static int push_response(lua_State *T, request *r) {
  long status = 0;
  curl_easy_getinfo(r->job.easy, CURLINFO_RESPONSE_CODE, &status);
  lua_pushinteger(T, status);
  push_headers(T, r);
  lua_pushlstring(T, r->body.data != NULL ? r->body.data : "", r->body.len);
  return 3;
}

static void request_done(sb_curl_job *job, CURLcode rc) {
  request *r = (request *)job;
  lua_State *T = r->task;
  lua_checkstack(T, 8); /* a suspended task has LUA_MINSTACK free; this is belt and braces */
  int nres;
  if (r->aborted_by != NULL)
    nres = sb_abort_push_fail(T, r->aborted_by);
  else if (rc == CURLE_OK)
    nres = push_response(T, r);
  else
    nres = push_failure(T, r, rc);
  request_free(r);
  sb_task_complete(T, nres);
}

static void request_dispose(sb_curl_job *job) { request_free((request *)job); }

static void request_aborted(sb_abort_listener *l, sb_abort *sig) {
  request *r = (request *)((char *)l - offsetof(request, on_abort));
  r->aborted_by = sig;
  sb_curl_job_cancel(&r->job);
}

/* ---- arguments --------------------------------------------------------------------------- */

typedef struct {
  const char *method, *url, *body, *unix_socket, *netns;
  /* TLS for a server with a private CA and client certificates (a Kubernetes API server):
   * a CA bundle file, or PEM bytes for the CA, the client certificate and its key */
  const char *ca_file, *ca_pem, *cert_pem, *key_pem;
  size_t body_len, max_body, ca_pem_len, cert_pem_len, key_pem_len;
  long deadline_ms;
  sb_abort *sig;
  bool has_headers, has_on_chunk;
  bool set_accept, set_content_type, set_expect;
  bool public_only;
} request_args;

/* A field of the argument table at index 1, left on the stack. */
static int field(lua_State *L, const char *name) { return lua_getfield(L, 1, name); }

static bool is_token(const char *s, size_t len) {
  if (len == 0)
    return false;
  for (size_t i = 0; i < len; i++) {
    unsigned char c = (unsigned char)s[i];
    if (c <= ' ' || c >= 127 || strchr("\"(),/:;<=>?@[\\]{}", c) != NULL)
      return false;
  }
  return true;
}

static bool is_header_value(const char *s, size_t len) {
  for (size_t i = 0; i < len; i++) {
    unsigned char c = (unsigned char)s[i];
    if (c == '\r' || c == '\n' || c == '\0')
      return false;
  }
  return true;
}

/* Validates the headers table (raises on a bad name or value, so no request is half-built)
 * and notes which of libcurl's defaults the caller overrides. */
static void check_headers(lua_State *L, int idx, request_args *a) {
  lua_pushnil(L);
  while (lua_next(L, idx) != 0) {
    if (lua_type(L, -2) != LUA_TSTRING)
      luaL_error(L, "core.http.request: header names must be strings");
    if (lua_type(L, -1) != LUA_TSTRING && lua_type(L, -1) != LUA_TNUMBER)
      luaL_error(L, "core.http.request: header '%s' must have a string value",
                 lua_tostring(L, -2));
    size_t nlen, vlen;
    const char *name = lua_tolstring(L, -2, &nlen);
    lua_pushvalue(L, -1);
    const char *value = lua_tolstring(L, -1, &vlen);
    if (!is_token(name, nlen))
      luaL_error(L, "core.http.request: invalid header name");
    if (!is_header_value(value, vlen)) /* the name is safe to show, the value never */
      luaL_error(L, "core.http.request: header '%s' has a CR, LF or NUL in its value", name);
    lua_pop(L, 2);
    if (strcasecmp(name, "accept") == 0)
      a->set_accept = true;
    else if (strcasecmp(name, "content-type") == 0)
      a->set_content_type = true;
    else if (strcasecmp(name, "expect") == 0)
      a->set_expect = true;
  }
}

static void parse_args(lua_State *L, request_args *a) {
  luaL_checktype(L, 1, LUA_TTABLE);
  lua_settop(L, 1); /* the fields below live in fixed stack slots */
  memset(a, 0, sizeof *a);
  a->max_body = DEFAULT_MAX_BODY;

  int t = field(L, "method"); /* stack slot 2 */
  if (t == LUA_TNIL) {
    lua_pop(L, 1);
    lua_pushliteral(L, "GET");
  }
  size_t mlen;
  a->method = lua_tolstring(L, 2, &mlen);
  if (lua_type(L, 2) != LUA_TSTRING || !is_token(a->method, mlen))
    luaL_error(L, "core.http.request: method must be an HTTP method name");

  if (field(L, "url") != LUA_TSTRING) /* slot 3 */
    luaL_error(L, "core.http.request: url (a string) is required");
  size_t ulen;
  a->url = lua_tolstring(L, 3, &ulen);
  if (strlen(a->url) != ulen)
    luaL_error(L, "core.http.request: url contains a NUL byte");

  t = field(L, "headers"); /* slot 4 */
  if (t == LUA_TTABLE) {
    a->has_headers = true;
    check_headers(L, 4, a);
  } else if (t != LUA_TNIL) {
    luaL_error(L, "core.http.request: headers must be a table of name → value");
  }

  t = field(L, "body"); /* slot 5 */
  if (t == LUA_TSTRING)
    a->body = lua_tolstring(L, 5, &a->body_len);
  else if (t != LUA_TNIL)
    luaL_error(L, "core.http.request: body must be a string");

  t = field(L, "deadline_ms");
  if (t != LUA_TNIL) {
    lua_Number ms = lua_tonumber(L, -1);
    if (t != LUA_TNUMBER || !(ms > 0) || ms > MAX_DEADLINE_MS)
      luaL_error(L, "core.http.request: deadline_ms must be a positive number of milliseconds");
    a->deadline_ms = (long)ceil(ms);
  }
  lua_pop(L, 1);

  field(L, "signal"); /* slot 6 */
  a->sig = sb_abort_opt(L, 6);

  t = field(L, "on_chunk"); /* slot 7 */
  if (t == LUA_TFUNCTION)
    a->has_on_chunk = true;
  else if (t != LUA_TNIL)
    luaL_error(L, "core.http.request: on_chunk must be a function");

  t = field(L, "unix_socket"); /* slot 8 */
  if (t == LUA_TSTRING)
    a->unix_socket = lua_tostring(L, 8);
  else if (t != LUA_TNIL)
    luaL_error(L, "core.http.request: unix_socket must be a path");

  t = field(L, "ca_file"); /* slot 9 */
  if (t == LUA_TSTRING)
    a->ca_file = lua_tostring(L, 9);
  else if (t != LUA_TNIL)
    luaL_error(L, "core.http.request: ca_file must be a path");
  static const char *const pem_fields[] = {"ca_pem", "client_cert_pem", "client_key_pem"};
  const char **pem[] = {&a->ca_pem, &a->cert_pem, &a->key_pem};
  size_t *pem_len[] = {&a->ca_pem_len, &a->cert_pem_len, &a->key_pem_len};
  for (int i = 0; i < 3; i++) { /* slots 10, 11, 12 */
    t = field(L, pem_fields[i]);
    if (t == LUA_TSTRING)
      *pem[i] = lua_tolstring(L, 10 + i, pem_len[i]);
    else if (t != LUA_TNIL)
      luaL_error(L, "core.http.request: %s must be PEM text", pem_fields[i]);
  }
  if ((a->cert_pem == NULL) != (a->key_pem == NULL))
    luaL_error(L, "core.http.request: client_cert_pem and client_key_pem go together");

  t = field(L, "public_only");
  if (t != LUA_TNIL && t != LUA_TBOOLEAN)
    luaL_error(L, "core.http.request: public_only must be a boolean");
  a->public_only = lua_toboolean(L, -1);
  lua_pop(L, 1);
  t = field(L, "netns"); /* slot 13 */
  if (t == LUA_TSTRING)
    a->netns = lua_tostring(L, 13);
  else if (t != LUA_TNIL)
    luaL_error(L, "core.http.request: netns must be the path of a network namespace");

  t = field(L, "max_body");
  if (t != LUA_TNIL) {
    int isint = 0;
    lua_Integer n = lua_tointegerx(L, -1, &isint);
    if (!isint || n < 0)
      luaL_error(L, "core.http.request: max_body must be a byte count");
    a->max_body = (size_t)n;
  }
  lua_pop(L, 1);
}

/* ---- the request ------------------------------------------------------------------------- */

static bool slist_add(struct curl_slist **list, const char *line) {
  struct curl_slist *grown = curl_slist_append(*list, line);
  if (grown == NULL)
    return false;
  *list = grown;
  return true;
}

/* "Name: value" lines exactly as given; libcurl's own Accept, Content-Type and Expect
 * (100-continue would add a round trip to large bodies) are removed unless the caller set
 * them. An empty value is sent with libcurl's "Name;" form ("Name:" would remove it). */
static bool build_headers(lua_State *L, const request_args *a, struct curl_slist **out) {
  struct curl_slist *list = NULL;
  bool ok = true;
  if (a->has_headers) {
    lua_pushnil(L);
    while (ok && lua_next(L, 4) != 0) {
      size_t nlen, vlen;
      const char *name = lua_tolstring(L, -2, &nlen);
      lua_pushvalue(L, -1); /* tolstring on a copy: never convert a number key in place */
      const char *value = lua_tolstring(L, -1, &vlen);
      char *line = malloc(nlen + vlen + 3);
      if (line == NULL) {
        ok = false;
      } else {
        memcpy(line, name, nlen);
        if (vlen == 0) {
          line[nlen] = ';';
          line[nlen + 1] = '\0';
        } else {
          line[nlen] = ':';
          line[nlen + 1] = ' ';
          memcpy(line + nlen + 2, value, vlen);
          line[nlen + 2 + vlen] = '\0';
        }
        ok = slist_add(&list, line);
        free(line);
      }
      lua_pop(L, 2);
    }
    if (!ok)
      lua_pop(L, 1); /* the key lua_next left */
  }
  if (ok && !a->set_accept)
    ok = slist_add(&list, "Accept:");
  if (ok && !a->set_content_type)
    ok = slist_add(&list, "Content-Type:");
  if (ok && !a->set_expect)
    ok = slist_add(&list, "Expect:");
  if (!ok) {
    curl_slist_free_all(list);
    return false;
  }
  *out = list;
  return true;
}

static bool configure(request *r, const request_args *a) {
  CURL *e = r->job.easy;
  bool ok = true;
#define SET(opt, val) ok = ok && curl_easy_setopt(e, opt, val) == CURLE_OK
  SET(CURLOPT_URL, a->url);
  SET(CURLOPT_NOSIGNAL, 1L);
  SET(CURLOPT_ERRORBUFFER, r->errbuf);
  SET(CURLOPT_PROTOCOLS_STR, "http,https");
  SET(CURLOPT_PROXY, ""); /* no proxy from the environment: tokens go where the URL says */
  SET(CURLOPT_FOLLOWLOCATION, 0L);
  SET(CURLOPT_HTTPHEADER, r->headers);
  SET(CURLOPT_HEADERFUNCTION, on_header);
  SET(CURLOPT_HEADERDATA, r);
  SET(CURLOPT_WRITEFUNCTION, on_body);
  SET(CURLOPT_WRITEDATA, r);
  SET(CURLOPT_OPENSOCKETFUNCTION, open_socket);
  SET(CURLOPT_OPENSOCKETDATA, r);
  if (r->netns_fd >= 0) {
    /* a connection cached for one namespace must never carry another's request */
    SET(CURLOPT_FRESH_CONNECT, 1L);
    SET(CURLOPT_FORBID_REUSE, 1L);
  }
  if (a->deadline_ms > 0)
    SET(CURLOPT_TIMEOUT_MS, a->deadline_ms);
  if (a->unix_socket != NULL)
    SET(CURLOPT_UNIX_SOCKET_PATH, a->unix_socket);
  if (a->ca_file != NULL)
    SET(CURLOPT_CAINFO, a->ca_file);
  /* blobs are copied by libcurl (CURL_BLOB_COPY): the Lua strings need not outlive this call */
  if (a->ca_pem != NULL) {
    struct curl_blob b = {(void *)a->ca_pem, a->ca_pem_len, CURL_BLOB_COPY};
    SET(CURLOPT_CAINFO_BLOB, &b);
  }
  if (a->cert_pem != NULL) {
    struct curl_blob c = {(void *)a->cert_pem, a->cert_pem_len, CURL_BLOB_COPY};
    struct curl_blob k = {(void *)a->key_pem, a->key_pem_len, CURL_BLOB_COPY};
    SET(CURLOPT_SSLCERTTYPE, "PEM");
    SET(CURLOPT_SSLCERT_BLOB, &c);
    SET(CURLOPT_SSLKEYTYPE, "PEM");
    SET(CURLOPT_SSLKEY_BLOB, &k);
  }
  bool is_post = strcmp(a->method, "POST") == 0;
  if (a->body != NULL || is_post) {
    SET(CURLOPT_POSTFIELDSIZE_LARGE, (curl_off_t)a->body_len);
    SET(CURLOPT_POSTFIELDS, a->body != NULL ? a->body : "");
    if (!is_post)
      SET(CURLOPT_CUSTOMREQUEST, a->method);
  } else if (strcmp(a->method, "HEAD") == 0) {
    SET(CURLOPT_NOBODY, 1L);
  } else if (strcmp(a->method, "GET") != 0) {
    SET(CURLOPT_CUSTOMREQUEST, a->method);
  }
#undef SET
  return ok;
}

static int l_request(lua_State *L) {
  sb_task_check(L, "core.http.request");
  request_args a;
  parse_args(L, &a);
  if (a.sig != NULL && sb_abort_fired(a.sig))
    return sb_abort_push_fail(L, a.sig);

  /* Everything that can raise is done; from here on failures are values. */
  char err[256] = "out of memory";
  request *r = calloc(1, sizeof *r);
  if (r == NULL)
    return sb_push_fail(L, "transport", err);
  r->signal_ref = r->on_chunk_ref = r->body_ref = LUA_NOREF;
  r->netns_fd = -1;
  r->task = L;
  r->max_body = a.max_body;
  r->deadline_ms = a.deadline_ms;
  r->public_only = a.public_only;
  r->job.done = request_done;
  r->job.dispose = request_dispose;
  r->job.easy = curl_easy_init();
  if (a.unix_socket != NULL && (r->unix_socket = strdup(a.unix_socket)) == NULL) {
    request_free(r);
    return sb_push_fail(L, "transport", err);
  }
  if (a.netns != NULL && (r->netns_fd = open(a.netns, O_RDONLY | O_CLOEXEC)) < 0) {
    request_free(r);
    return sb_push_fail(L, "transport", "cannot open the network namespace to connect in");
  }
  if (r->job.easy == NULL || !build_headers(L, &a, &r->headers) || !configure(r, &a)) {
    request_free(r);
    return sb_push_fail(L, "transport", "cannot set up the request (out of memory?)");
  }
  /* Anchor what libcurl and the callbacks read while the task is suspended. */
  if (a.body != NULL) {
    lua_pushvalue(L, 5);
    r->body_ref = luaL_ref(L, LUA_REGISTRYINDEX);
  }
  if (a.has_on_chunk) {
    lua_pushvalue(L, 7);
    r->on_chunk_ref = luaL_ref(L, LUA_REGISTRYINDEX);
  }
  if (a.sig != NULL) {
    lua_pushvalue(L, 6);
    r->signal_ref = luaL_ref(L, LUA_REGISTRYINDEX);
    sb_abort_listen(a.sig, &r->on_abort, request_aborted);
  }
  if (!sb_curl_job_start(&r->job, err, sizeof err)) {
    request_free(r);
    return sb_push_fail(L, "transport", err);
  }
  return sb_task_yield(L);
}

/* ---- module ------------------------------------------------------------------------------ */

/* At engine shutdown, transfers in flight are dropped (their tasks are not resumed) while the
 * loop can still close their handles. */
static void client_shutdown(void *ud) {
  (void)ud;
  sb_curl_teardown();
}

int sb_http_client_open(lua_State *L) {
  sb_shutdown_register(client_shutdown, NULL);
  static const luaL_Reg fns[] = {{"request", l_request}, {NULL, NULL}};
  sb_module_table(L, "http", fns);
  return 0;
}
