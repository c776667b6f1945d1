/* sb_ct_equal: compare digests, not the inputs, so no length or content shortcut exists.
 * sb_ct_secret: a kept secret, zero-padded, compared over the candidate's own length. */
#include "ct.h"

#include <openssl/crypto.h>
#include <openssl/evp.h>
#include <pthread.h>
#include <stdlib.h>
#include <string.h>

static const EVP_MD *fetched_sha256;

static void fetch_sha256(void) {
  /* Kept for the process's life (never freed: the digest is wanted until exit). A failed
   * fetch leaves the descriptor, which fetches per call as before. */
  EVP_MD *md = EVP_MD_fetch(NULL, "SHA256", NULL);
  fetched_sha256 = md != NULL ? md : EVP_sha256();
}

const EVP_MD *sb_sha256(void) {
  static pthread_once_t once = PTHREAD_ONCE_INIT;
  pthread_once(&once, fetch_sha256);
  return fetched_sha256;
}

int sb_ct_equal(const void *a, size_t alen, const void *b, size_t blen) {
  unsigned char da[EVP_MAX_MD_SIZE], db[EVP_MAX_MD_SIZE];
  unsigned int la = 0, lb = 0;
  if (!EVP_Digest(a, alen, da, &la, sb_sha256(), NULL) ||
      !EVP_Digest(b, blen, db, &lb, sb_sha256(), NULL))
    return -1;
  int digests_differ = CRYPTO_memcmp(da, db, la);
  /* Equal digests of different lengths would be a SHA-256 collision; check anyway, without a
   * branch on the contents. */
  return (digests_differ == 0) & (alen == blen);
}

void sb_ct_secret_clear(sb_ct_secret *s) {
  if (s->padded != NULL)
    OPENSSL_cleanse(s->padded, s->cap);
  free(s->padded);
  *s = (sb_ct_secret){NULL, 0, 0};
}

int sb_ct_secret_set(sb_ct_secret *s, const void *secret, size_t len, size_t cap) {
  sb_ct_secret_clear(s);
  if (cap < len)
    cap = len;
  unsigned char *padded = calloc(1, cap > 0 ? cap : 1);
  if (padded == NULL)
    return -1;
  memcpy(padded, secret, len);
  *s = (sb_ct_secret){padded, len, cap};
  return 0;
}

int sb_ct_secret_equal(const sb_ct_secret *s, const void *given, size_t n) {
  /* A branch on the candidate's own length (and the public cap) only. */
  if (s->padded == NULL || s->len == 0 || n > s->cap)
    return 0;
  /* Over the candidate's n bytes: the secret's, then its zero padding when n is longer. */
  int bytes_differ = CRYPTO_memcmp(given, s->padded, n);
  return (bytes_differ == 0) & (n == s->len);
}
