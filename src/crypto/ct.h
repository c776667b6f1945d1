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

/* A secret that candidates are compared with in a time that depends on the candidate's length
 * only: the secret is kept zero-padded to `cap` bytes and a candidate of n <= cap bytes is
 * compared with CRYPTO_memcmp over its own n bytes, its length with the secret's without a
 * branch. Neither the secret's bytes nor its length shape the time, as with sb_ct_equal, but
 * no digest is made per candidate: an OpenSSL 3 digest's context setup was ~3.5 % of
 * sandboxd's CPU per walled request (its bearer, issue 43). `cap` is a bound no candidate can
 * pass (sandboxd: the request head's size limit, which bounds any header value); a candidate
 * longer is refused on its own length. */
typedef struct {
  unsigned char *padded; /* the secret, then zeros to cap */
  size_t len, cap;
} sb_ct_secret;

/* Keeps a copy of secret[0..len) padded to max(cap, len) bytes. 0, or -1 when out of memory
 * (s is then empty: nothing equals it). */
int sb_ct_secret_set(sb_ct_secret *s, const void *secret, size_t len, size_t cap);
/* 1 when given[0..n) is the secret, else 0. An empty secret equals nothing. */
int sb_ct_secret_equal(const sb_ct_secret *s, const void *given, size_t n);
/* Wipes and frees the copy (s is then empty). */
void sb_ct_secret_clear(sb_ct_secret *s);

#endif
