/* Constant-time equality for secrets (bearer tokens, HMAC signatures). */
#ifndef SB_CT_H
#define SB_CT_H

#include <openssl/types.h>
#include <stddef.h>

/* 1 when a[0..alen) equals b[0..blen), 0 otherwise, -1 when OpenSSL failed (out of memory).
 * Both sides are hashed with SHA-256 and the digests compared with CRYPTO_memcmp, so the time
 * depends on the two lengths only: never on the contents, never on where they first differ,
 * and inputs of different lengths take the same path as inputs of the same length. */
int sb_ct_equal(const void *a, size_t alen, const void *b, size_t blen);

/* SHA-256's implementation, fetched from OpenSSL's provider once per process. EVP_sha256() is
 * only a descriptor: each EVP_Digest with it fetches the implementation again (a lock and a
 * lookup by name), which was most of a short digest's cost — sandboxd hashes a bearer and a
 * thread key per request (issue 43). */
const EVP_MD *sb_sha256(void);

#endif
