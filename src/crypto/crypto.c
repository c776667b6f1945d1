/* core.crypto: SHA-256, HMAC-SHA256, hex, constant-time equality, randomness and base64.
 * Every function is synchronous and CPU-bound on small inputs; nothing here yields.
 * OpenSSL 3 EVP interfaces only (no deprecated low-level calls).
 *
 * sha256(bytes) → 32 raw bytes            hmac_sha256(key, bytes) → 32 raw bytes
 * hex(bytes) → lowercase hex              ct_equal(a, b) → boolean (time independent of contents)
 * random_bytes(n) → n bytes (raises if the CSPRNG fails; n ≤ 1 MiB)
 * base64_encode(bytes) / base64url_encode(bytes) (no padding) → text
 * base64_decode(text) / base64url_decode(text) → bytes | nil, {kind="invalid", message}
 * rs256_sign, rs256_verify, rsa_generate: see rs256.c
 * aes256gcm_seal, aes256gcm_open: see gcm.c
 * Wrong argument types raise (programmer errors). */
#include "../engine/engine.h"
#include "base64.h"
#include "crypto.h"
#include "ct.h"

#include <openssl/err.h>
#include <openssl/evp.h>
#include <openssl/rand.h>
#include <stdio.h>
#include <string.h>

#define MAX_RANDOM_BYTES (1 << 20) /* bytes; random_bytes(n) beyond it is a programmer error */

int sb_crypto_fail(lua_State *L, const char *what) {
  unsigned long code = ERR_peek_error();
  const char *reason = code != 0 ? ERR_reason_error_string(code) : NULL;
  char msg[512];
  if (reason != NULL)
    snprintf(msg, sizeof msg, "%s (OpenSSL: %s)", what, reason);
  else
    snprintf(msg, sizeof msg, "%s", what);
  ERR_clear_error();
  return sb_push_fail(L, "crypto", msg);
}

/* Raises on a failure that only running out of memory explains. */
static int raise_openssl(lua_State *L, const char *what) {
  unsigned long code = ERR_peek_error();
  const char *reason = code != 0 ? ERR_reason_error_string(code) : NULL;
  ERR_clear_error();
  return luaL_error(L, "%s failed (OpenSSL: %s)", what, reason != NULL ? reason : "unknown");
}

static int l_sha256(lua_State *L) {
  size_t n;
  const char *data = luaL_checklstring(L, 1, &n);
  unsigned char md[EVP_MAX_MD_SIZE];
  unsigned int len = 0;
  if (!EVP_Digest(data, n, md, &len, sb_sha256(), NULL))
    return raise_openssl(L, "sha256");
  lua_pushlstring(L, (const char *)md, len);
  return 1;
}

static int l_hmac_sha256(lua_State *L) {
  size_t klen, n;
  const char *key = luaL_checklstring(L, 1, &klen);
  const char *data = luaL_checklstring(L, 2, &n);
  unsigned char mac[EVP_MAX_MD_SIZE];
  size_t len = 0;
  /* EVP_Q_mac refuses a NULL key even when it is empty; HMAC itself allows empty keys. */
  static const unsigned char empty_key[1] = {0};
  if (EVP_Q_mac(NULL, "HMAC", NULL, "SHA256", NULL, klen > 0 ? (const void *)key : empty_key,
                klen, (const unsigned char *)data, n, mac, sizeof mac, &len) == NULL)
    return raise_openssl(L, "hmac_sha256");
  lua_pushlstring(L, (const char *)mac, len);
  return 1;
}

static int l_hex(lua_State *L) {
  static const char digits[] = "0123456789abcdef";
  size_t n;
  const unsigned char *s = (const unsigned char *)luaL_checklstring(L, 1, &n);
  luaL_argcheck(L, n <= ((size_t)-1) / 2, 1, "too long");
  luaL_Buffer b;
  char *out = luaL_buffinitsize(L, &b, n * 2);
  for (size_t i = 0; i < n; i++) {
    out[2 * i] = digits[s[i] >> 4];
    out[2 * i + 1] = digits[s[i] & 15];
  }
  luaL_pushresultsize(&b, n * 2);
  return 1;
}

static int l_ct_equal(lua_State *L) {
  size_t alen, blen;
  const char *a = luaL_checklstring(L, 1, &alen);
  const char *b = luaL_checklstring(L, 2, &blen);
  int eq = sb_ct_equal(a, alen, b, blen);
  if (eq < 0)
    return raise_openssl(L, "ct_equal");
  lua_pushboolean(L, eq);
  return 1;
}

static int l_random_bytes(lua_State *L) {
  lua_Integer n = luaL_checkinteger(L, 1);
  luaL_argcheck(L, n >= 0 && n <= MAX_RANDOM_BYTES, 1, "a count of bytes in [0, 1 MiB] expected");
  luaL_Buffer b;
  unsigned char *out = (unsigned char *)luaL_buffinitsize(L, &b, (size_t)n);
  /* A CSPRNG that cannot produce bytes must not be papered over: raise. */
  if (n > 0 && RAND_bytes(out, (int)n) != 1)
    return raise_openssl(L, "random_bytes: RAND_bytes");
  luaL_pushresultsize(&b, (size_t)n);
  return 1;
}

static int encode(lua_State *L, sb_b64_alphabet a) {
  size_t n;
  const char *data = luaL_checklstring(L, 1, &n);
  size_t len = sb_base64_encoded_len(n, a);
  luaL_argcheck(L, len != (size_t)-1, 1, "too long");
  luaL_Buffer b;
  char *out = luaL_buffinitsize(L, &b, len);
  size_t written = sb_base64_encode(out, (const uint8_t *)data, n, a);
  luaL_pushresultsize(&b, written);
  return 1;
}

static int decode(lua_State *L, sb_b64_alphabet a) {
  size_t n;
  const char *text = luaL_checklstring(L, 1, &n);
  luaL_Buffer b;
  uint8_t *out = (uint8_t *)luaL_buffinitsize(L, &b, sb_base64_decoded_max(n));
  size_t len = 0, bad_at = 0;
  const char *why = NULL;
  if (!sb_base64_decode(out, &len, text, n, a, &bad_at, &why)) {
    char msg[256];
    snprintf(msg, sizeof msg, "invalid %s at byte %zu of %zu: %s",
             a == SB_B64_STD ? "base64" : "base64url", bad_at, n, why);
    return sb_push_fail(L, "invalid", msg);
  }
  luaL_pushresultsize(&b, len);
  return 1;
}

static int l_base64_encode(lua_State *L) { return encode(L, SB_B64_STD); }
static int l_base64_decode(lua_State *L) { return decode(L, SB_B64_STD); }
static int l_base64url_encode(lua_State *L) { return encode(L, SB_B64_URL); }
static int l_base64url_decode(lua_State *L) { return decode(L, SB_B64_URL); }

int sb_crypto_open(lua_State *L) {
  static const luaL_Reg fns[] = {
      {"sha256", l_sha256},
      {"hmac_sha256", l_hmac_sha256},
      {"hex", l_hex},
      {"ct_equal", l_ct_equal},
      {"random_bytes", l_random_bytes},
      {"base64_encode", l_base64_encode},
      {"base64_decode", l_base64_decode},
      {"base64url_encode", l_base64url_encode},
      {"base64url_decode", l_base64url_decode},
      {NULL, NULL},
  };
  luaL_newlib(L, fns);
  sb_crypto_rsa_fields(L);
  sb_crypto_gcm_fields(L);
  lua_setfield(L, -2, "crypto");
  return 0;
}
