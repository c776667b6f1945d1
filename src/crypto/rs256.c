/* core.crypto RS256: rs256_sign (GitHub App JWTs), rs256_verify (test stand-ins) and
 * rsa_generate (tests). RSASSA-PKCS1-v1_5 with SHA-256 through EVP_DigestSign/Verify.
 *
 * Key text never reaches an error message: failures carry our own words and the static reason
 * string of the OpenSSL error (ERR_reason_error_string), never the error's data field. Private
 * key PEMs we produce are written to a secure-heap memory BIO and cleansed before it is freed.
 * Encrypted private keys are refused (the passphrase callback declines) instead of prompting on
 * the terminal, which is what OpenSSL's default callback would do. */
#include "../engine/engine.h"
#include "crypto.h"

#include <limits.h>
#include <openssl/bio.h>
#include <openssl/buffer.h>
#include <openssl/crypto.h>
#include <openssl/decoder.h>
#include <openssl/err.h>
#include <openssl/evp.h>
#include <openssl/pem.h>
#include <openssl/rsa.h>
#include <stdlib.h>

#define MIN_RSA_BITS 1024
#define MAX_RSA_BITS 16384

static int decline_passphrase(char *buf, int size, int rwflag, void *u) {
  (void)buf, (void)size, (void)rwflag, (void)u;
  return -1;
}

/* A PKCS#1 ("RSA PRIVATE KEY") or PKCS#8 ("PRIVATE KEY") PEM → an RSA key, or NULL with the
 * OpenSSL error queue explaining why (plus *not_rsa when it parsed but is another kind). */
static EVP_PKEY *read_private_key(const char *pem, size_t n, int *not_rsa) {
  *not_rsa = 0;
  if (n == 0 || n > INT_MAX)
    return NULL;
  BIO *bio = BIO_new_mem_buf(pem, (int)n); /* a read-only view of the Lua string */
  if (bio == NULL)
    return NULL;
  EVP_PKEY *pkey = PEM_read_bio_PrivateKey_ex(bio, NULL, decline_passphrase, NULL, NULL, NULL);
  BIO_free(bio);
  if (pkey != NULL && !EVP_PKEY_is_a(pkey, "RSA")) {
    *not_rsa = 1;
    EVP_PKEY_free(pkey);
    pkey = NULL;
  }
  return pkey;
}

/* A SubjectPublicKeyInfo ("PUBLIC KEY") or PKCS#1 ("RSA PUBLIC KEY") PEM → an RSA key. */
static EVP_PKEY *read_public_key(const char *pem, size_t n) {
  EVP_PKEY *pkey = NULL;
  OSSL_DECODER_CTX *dctx = OSSL_DECODER_CTX_new_for_pkey(&pkey, "PEM", NULL, "RSA",
                                                         EVP_PKEY_PUBLIC_KEY, NULL, NULL);
  if (dctx == NULL)
    return NULL;
  const unsigned char *p = (const unsigned char *)pem;
  size_t left = n;
  if (n == 0 || !OSSL_DECODER_from_data(dctx, &p, &left)) {
    EVP_PKEY_free(pkey);
    pkey = NULL;
  }
  OSSL_DECODER_CTX_free(dctx);
  return pkey;
}

/* rs256_sign(private_pem, bytes) → signature bytes | nil, {kind="crypto", message} */
static int l_rs256_sign(lua_State *L) {
  size_t pem_len, n;
  const char *pem = luaL_checklstring(L, 1, &pem_len);
  const char *data = luaL_checklstring(L, 2, &n);
  EVP_PKEY *pkey = NULL;
  EVP_MD_CTX *ctx = NULL;
  unsigned char *sig = NULL;
  size_t sig_len = 0;
  EVP_PKEY_CTX *pctx = NULL; /* owned by ctx */
  const char *failure = NULL;
  int not_rsa = 0;

  ERR_clear_error();
  pkey = read_private_key(pem, pem_len, &not_rsa);
  if (pkey == NULL) {
    failure = not_rsa ? "rs256_sign: the private key is not an RSA key; RS256 needs an RSA key"
                      : "rs256_sign: could not read the private key; expected an unencrypted "
                        "PEM in PKCS#1 (BEGIN RSA PRIVATE KEY) or PKCS#8 (BEGIN PRIVATE KEY) form";
    goto done;
  }
  ctx = EVP_MD_CTX_new();
  if (ctx == NULL || EVP_DigestSignInit_ex(ctx, &pctx, "SHA256", NULL, NULL, pkey, NULL) != 1 ||
      EVP_PKEY_CTX_set_rsa_padding(pctx, RSA_PKCS1_PADDING) <= 0 ||
      EVP_DigestSign(ctx, NULL, &sig_len, (const unsigned char *)data, n) != 1) {
    failure = "rs256_sign: could not set up RSA-SHA256 signing with this key";
    goto done;
  }
  sig = malloc(sig_len);
  if (sig == NULL || EVP_DigestSign(ctx, sig, &sig_len, (const unsigned char *)data, n) != 1) {
    failure = "rs256_sign: signing failed";
    goto done;
  }

done:
  EVP_MD_CTX_free(ctx);
  EVP_PKEY_free(pkey); /* frees (and clears) the key material */
  if (failure != NULL) {
    free(sig);
    return sb_crypto_fail(L, failure);
  }
  lua_pushlstring(L, (const char *)sig, sig_len);
  free(sig);
  return 1;
}

/* rs256_verify(public_pem, bytes, sig) → boolean | nil, {kind="crypto"} for an unreadable key */
static int l_rs256_verify(lua_State *L) {
  size_t pem_len, n, sig_len;
  const char *pem = luaL_checklstring(L, 1, &pem_len);
  const char *data = luaL_checklstring(L, 2, &n);
  const char *sig = luaL_checklstring(L, 3, &sig_len);
  EVP_MD_CTX *ctx = NULL;
  EVP_PKEY_CTX *pctx = NULL; /* owned by ctx */
  int verdict = -1;          /* 1 valid, 0 invalid, -1 could not verify */

  ERR_clear_error();
  EVP_PKEY *pkey = read_public_key(pem, pem_len);
  if (pkey == NULL)
    goto done;
  ctx = EVP_MD_CTX_new();
  if (ctx == NULL || EVP_DigestVerifyInit_ex(ctx, &pctx, "SHA256", NULL, NULL, pkey, NULL) != 1 ||
      EVP_PKEY_CTX_set_rsa_padding(pctx, RSA_PKCS1_PADDING) <= 0)
    goto done;
  /* 1 is a valid signature; 0 or a negative value (malformed signature) is not. */
  verdict = EVP_DigestVerify(ctx, (const unsigned char *)sig, sig_len,
                             (const unsigned char *)data, n) == 1;

done:
  EVP_MD_CTX_free(ctx);
  EVP_PKEY_free(pkey);
  if (verdict < 0)
    return sb_crypto_fail(L, "rs256_verify: could not read the public key; expected a PEM "
                             "(BEGIN PUBLIC KEY or BEGIN RSA PUBLIC KEY)");
  ERR_clear_error(); /* a bad signature leaves errors behind */
  lua_pushboolean(L, verdict);
  return 1;
}

/* Pushes the contents of a memory BIO as a Lua string, then cleanses them. */
static void push_and_cleanse(lua_State *L, BIO *bio) {
  BUF_MEM *mem = NULL;
  BIO_get_mem_ptr(bio, &mem);
  lua_pushlstring(L, mem->data, mem->length);
  OPENSSL_cleanse(mem->data, mem->max);
}

/* rsa_generate([bits=2048]) → private_pem (PKCS#8), public_pem (SubjectPublicKeyInfo). For
 * tests and stand-ins; raises on failure. */
static int l_rsa_generate(lua_State *L) {
  lua_Integer bits = luaL_optinteger(L, 1, 2048);
  luaL_argcheck(L, bits >= MIN_RSA_BITS && bits <= MAX_RSA_BITS, 1,
                "RSA key size in bits in [1024, 16384] expected");
  EVP_PKEY *pkey = NULL;
  BIO *priv = NULL, *pub = NULL;
  const char *failure = NULL;

  ERR_clear_error();
  pkey = EVP_PKEY_Q_keygen(NULL, NULL, "RSA", (size_t)bits);
  if (pkey == NULL) {
    failure = "rsa_generate: key generation failed";
    goto done;
  }
  priv = BIO_new(BIO_s_secmem());
  pub = BIO_new(BIO_s_mem());
  if (priv == NULL || pub == NULL ||
      !PEM_write_bio_PrivateKey(priv, pkey, NULL, NULL, 0, NULL, NULL) ||
      !PEM_write_bio_PUBKEY(pub, pkey)) {
    failure = "rsa_generate: could not write the key as PEM";
    goto done;
  }

done:
  EVP_PKEY_free(pkey);
  if (failure != NULL) {
    BIO_free(priv);
    BIO_free(pub);
    unsigned long code = ERR_peek_error();
    const char *reason = code != 0 ? ERR_reason_error_string(code) : NULL;
    ERR_clear_error();
    return luaL_error(L, "%s (OpenSSL: %s)", failure, reason != NULL ? reason : "unknown");
  }
  push_and_cleanse(L, priv);
  BIO_free(priv);
  push_and_cleanse(L, pub);
  BIO_free(pub);
  return 2;
}

void sb_crypto_rsa_fields(lua_State *L) {
  static const luaL_Reg fns[] = {
      {"rs256_sign", l_rs256_sign},
      {"rs256_verify", l_rs256_verify},
      {"rsa_generate", l_rsa_generate},
      {NULL, NULL},
  };
  luaL_setfuncs(L, fns, 0);
}
