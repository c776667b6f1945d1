/* core.crypto AES-256-GCM: the sealing of repository secrets at rest (docs/secrets.md).
 *
 * aes256gcm_seal(key, nonce, plaintext, aad) → ciphertext .. tag (16 bytes)
 * aes256gcm_open(key, nonce, sealed, aad) → plaintext | nil, {kind="crypto", message}
 *
 * key is 32 bytes, nonce 12 (the caller draws it from random_bytes: a nonce is never reused
 * under one key), aad is authenticated but not encrypted (the repository and the name, so a
 * sealed value cannot be moved to another). A wrong size is a programmer error and raises; a
 * tag that does not verify is a value (`nil, err`) whose message names no input byte. The
 * plaintext of a failed open is never returned: it is cleansed. */
#include "../engine/engine.h"
#include "crypto.h"

#include <limits.h>
#include <openssl/crypto.h>
#include <openssl/err.h>
#include <openssl/evp.h>

enum { KEY_BYTES = 32, NONCE_BYTES = 12, TAG_BYTES = 16 };

/* The four arguments both calls take: key, nonce, the text (plain or sealed) and the aad. */
typedef struct gcm_args {
  const unsigned char *key, *nonce, *text, *aad;
  size_t text_n, aad_n;
} gcm_args;

static gcm_args read_args(lua_State *L) {
  gcm_args a;
  size_t key_n, nonce_n;
  a.key = (const unsigned char *)luaL_checklstring(L, 1, &key_n);
  a.nonce = (const unsigned char *)luaL_checklstring(L, 2, &nonce_n);
  a.text = (const unsigned char *)luaL_checklstring(L, 3, &a.text_n);
  a.aad = (const unsigned char *)luaL_optlstring(L, 4, "", &a.aad_n);
  luaL_argcheck(L, key_n == KEY_BYTES, 1, "the key must be 32 bytes");
  luaL_argcheck(L, nonce_n == NONCE_BYTES, 2, "the nonce must be 12 bytes");
  luaL_argcheck(L, a.text_n < INT_MAX - TAG_BYTES, 3, "too long");
  luaL_argcheck(L, a.aad_n < INT_MAX, 4, "too long");
  return a;
}

/* One cipher context per call: these are rare (a secret set, a command's secrets resolved). */
static EVP_CIPHER_CTX *begin(const unsigned char *key, const unsigned char *nonce, int encrypt,
                             const unsigned char *aad, size_t aad_n) {
  EVP_CIPHER_CTX *ctx = EVP_CIPHER_CTX_new();
  int len = 0;
  if (ctx == NULL)
    return NULL;
  if (EVP_CipherInit_ex(ctx, EVP_aes_256_gcm(), NULL, NULL, NULL, encrypt) != 1 ||
      EVP_CIPHER_CTX_ctrl(ctx, EVP_CTRL_GCM_SET_IVLEN, NONCE_BYTES, NULL) != 1 ||
      EVP_CipherInit_ex(ctx, NULL, NULL, key, nonce, encrypt) != 1 ||
      (aad_n > 0 && EVP_CipherUpdate(ctx, NULL, &len, aad, (int)aad_n) != 1)) {
    EVP_CIPHER_CTX_free(ctx);
    return NULL;
  }
  return ctx;
}

static int l_seal(lua_State *L) {
  gcm_args a = read_args(L);
  luaL_Buffer b;
  unsigned char *out = (unsigned char *)luaL_buffinitsize(L, &b, a.text_n + TAG_BYTES);
  int len = 0, fin = 0, ok = 0;
  EVP_CIPHER_CTX *ctx = begin(a.key, a.nonce, 1, a.aad, a.aad_n);
  if (ctx == NULL)
    goto done;
  if (EVP_CipherUpdate(ctx, out, &len, a.text, (int)a.text_n) != 1 ||
      EVP_CipherFinal_ex(ctx, out + len, &fin) != 1 ||
      EVP_CIPHER_CTX_ctrl(ctx, EVP_CTRL_GCM_GET_TAG, TAG_BYTES, out + len + fin) != 1)
    goto done;
  ok = 1;
done:
  EVP_CIPHER_CTX_free(ctx);
  if (!ok)
    return sb_crypto_fail(L, "aes256gcm_seal failed");
  luaL_pushresultsize(&b, (size_t)(len + fin) + TAG_BYTES);
  return 1;
}

static int l_open(lua_State *L) {
  gcm_args a = read_args(L); /* a.text is the sealed value: ciphertext .. tag */
  if (a.text_n < TAG_BYTES)
    return sb_push_fail(L, "crypto", "aes256gcm_open: the sealed value is shorter than its tag");
  size_t text_n = a.text_n - TAG_BYTES;
  unsigned char *out = OPENSSL_malloc(text_n + 1); /* +1: a zero-length malloc may be NULL */
  int len = 0, fin = 0, ok = 0;
  EVP_CIPHER_CTX *ctx = out != NULL ? begin(a.key, a.nonce, 0, a.aad, a.aad_n) : NULL;
  if (ctx == NULL)
    goto done;
  /* The tag is set before the final call, which is where GCM verifies it. */
  if (EVP_CipherUpdate(ctx, out, &len, a.text, (int)text_n) != 1 ||
      EVP_CIPHER_CTX_ctrl(ctx, EVP_CTRL_GCM_SET_TAG, TAG_BYTES, (void *)(a.text + text_n)) != 1 ||
      EVP_CipherFinal_ex(ctx, out + len, &fin) != 1)
    goto done;
  ok = 1;
done:
  EVP_CIPHER_CTX_free(ctx);
  ERR_clear_error();
  if (ok)
    lua_pushlstring(L, (const char *)out, (size_t)(len + fin));
  if (out != NULL)
    OPENSSL_clear_free(out, text_n + 1);
  if (!ok)
    return sb_push_fail(L, "crypto",
                        "aes256gcm_open: the value does not verify (a wrong key, or it was altered "
                        "or moved to another repository or name)");
  return 1;
}

void sb_crypto_gcm_fields(lua_State *L) {
  static const luaL_Reg fns[] = {
      {"aes256gcm_seal", l_seal}, {"aes256gcm_open", l_open}, {NULL, NULL}};
  luaL_setfuncs(L, fns, 0);
}
