/* sb_ct_equal: compare digests, not the inputs, so no length or content shortcut exists. */
#include "ct.h"

#include <openssl/crypto.h>
#include <openssl/evp.h>

int sb_ct_equal(const void *a, size_t alen, const void *b, size_t blen) {
  unsigned char da[EVP_MAX_MD_SIZE], db[EVP_MAX_MD_SIZE];
  unsigned int la = 0, lb = 0;
  /* EVP_sha256() is a static descriptor; EVP_Digest fetches the provider implementation. */
  if (!EVP_Digest(a, alen, da, &la, EVP_sha256(), NULL) ||
      !EVP_Digest(b, blen, db, &lb, EVP_sha256(), NULL))
    return -1;
  int digests_differ = CRYPTO_memcmp(da, db, la);
  /* Equal digests of different lengths would be a SHA-256 collision; check anyway, without a
   * branch on the contents. */
  return (digests_differ == 0) & (alen == blen);
}
