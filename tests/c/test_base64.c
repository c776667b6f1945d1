/* Unit tests for src/crypto/base64.c: RFC 4648 vectors, round trips of every length in both
 * alphabets, and the inputs a strict decoder must refuse (with where and why). */
#include "crypto/base64.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "check.h"

static char *encode(const void *in, size_t n, sb_b64_alphabet a, size_t *len) {
  char *out = malloc(sb_base64_encoded_len(n, a) + 1);
  *len = sb_base64_encode(out, in, n, a);
  out[*len] = '\0';
  return out;
}

/* Decodes; returns a malloc'd buffer or NULL (with *bad_at). */
static uint8_t *decode(const char *text, size_t n, sb_b64_alphabet a, size_t *len,
                       size_t *bad_at) {
  uint8_t *out = malloc(sb_base64_decoded_max(n));
  const char *why = NULL;
  if (!sb_base64_decode(out, len, text, n, a, bad_at, &why)) {
    free(out);
    CHECK(why != NULL && why[0] != '\0', "a refusal carries an explanation");
    return NULL;
  }
  return out;
}

static void test_rfc4648_vectors(void) {
  static const struct {
    const char *plain, *std, *url;
  } v[] = {
      {"", "", ""},
      {"f", "Zg==", "Zg"},
      {"fo", "Zm8=", "Zm8"},
      {"foo", "Zm9v", "Zm9v"},
      {"foob", "Zm9vYg==", "Zm9vYg"},
      {"fooba", "Zm9vYmE=", "Zm9vYmE"},
      {"foobar", "Zm9vYmFy", "Zm9vYmFy"},
  };
  for (size_t i = 0; i < sizeof v / sizeof v[0]; i++) {
    size_t n = strlen(v[i].plain), len, bad;
    char *e = encode(v[i].plain, n, SB_B64_STD, &len);
    CHECK(strcmp(e, v[i].std) == 0, "std encode %s: got %s", v[i].plain, e);
    CHECK(len == sb_base64_encoded_len(n, SB_B64_STD), "encoded_len std %zu", n);
    free(e);
    e = encode(v[i].plain, n, SB_B64_URL, &len);
    CHECK(strcmp(e, v[i].url) == 0, "url encode %s: got %s", v[i].plain, e);
    CHECK(len == sb_base64_encoded_len(n, SB_B64_URL), "encoded_len url %zu", n);
    free(e);
    uint8_t *d = decode(v[i].std, strlen(v[i].std), SB_B64_STD, &len, &bad);
    CHECK(d != NULL && len == n && memcmp(d, v[i].plain, n) == 0, "std decode %s", v[i].std);
    free(d);
    d = decode(v[i].url, strlen(v[i].url), SB_B64_URL, &len, &bad);
    CHECK(d != NULL && len == n && memcmp(d, v[i].plain, n) == 0, "url decode %s", v[i].url);
    free(d);
    /* base64url also takes correct padding */
    d = decode(v[i].std, strlen(v[i].std), SB_B64_URL, &len, &bad);
    CHECK(d != NULL && len == n, "url decode of padded %s", v[i].std);
    free(d);
  }
  /* The two alphabets differ exactly in 62 and 63. */
  const uint8_t hi[] = {0xfb, 0xff, 0xbf};
  size_t len;
  char *e = encode(hi, 3, SB_B64_STD, &len);
  CHECK(strcmp(e, "+/+/") == 0, "std 62/63: %s", e);
  free(e);
  e = encode(hi, 3, SB_B64_URL, &len);
  CHECK(strcmp(e, "-_-_") == 0, "url 62/63: %s", e);
  free(e);
}

static void test_round_trips(void) {
  uint8_t buf[600];
  srand(12345);
  for (size_t n = 0; n <= sizeof buf; n++) {
    for (size_t i = 0; i < n; i++)
      buf[i] = (uint8_t)rand();
    if (n > 2)
      buf[n / 2] = 0; /* a NUL in the middle */
    for (int a = SB_B64_STD; a <= SB_B64_URL; a++) {
      size_t len, dlen, bad;
      char *e = encode(buf, n, (sb_b64_alphabet)a, &len);
      uint8_t *d = decode(e, len, (sb_b64_alphabet)a, &dlen, &bad);
      CHECK(d != NULL && dlen == n && (n == 0 || memcmp(d, buf, n) == 0),
            "round trip of %zu bytes, alphabet %d", n, a);
      CHECK(dlen <= sb_base64_decoded_max(len), "decoded_max bound");
      free(d);
      free(e);
    }
  }
}

static void refused(const char *text, sb_b64_alphabet a, size_t expect_bad_at) {
  size_t len, bad = 12345;
  uint8_t *d = decode(text, strlen(text), a, &len, &bad);
  CHECK(d == NULL, "%s \"%s\" must be refused", a == SB_B64_STD ? "base64" : "base64url", text);
  CHECK(d != NULL || bad == expect_bad_at, "\"%s\": bad_at %zu, expected %zu", text, bad,
        expect_bad_at);
  free(d);
}

static void test_invalid_input(void) {
  refused("Zg", SB_B64_STD, 2);         /* standard needs its padding */
  refused("Zg=", SB_B64_STD, 2);        /* padding that does not complete a group */
  refused("Zm9", SB_B64_STD, 3);
  refused("Zh==", SB_B64_STD, 1);       /* non-zero bits after the last byte */
  refused("Zm9=", SB_B64_STD, 2);       /* "Zm9=" would need the low bits of '9' zero */
  refused("Z===", SB_B64_STD, 1);       /* three '=' */
  refused("====", SB_B64_STD, 0);
  refused("=Zg=", SB_B64_STD, 0);
  refused("Zg==Zg==", SB_B64_STD, 2);   /* padding in the middle */
  refused("Zm9v\n", SB_B64_STD, 5);     /* whitespace is garbage, not skipped */
  refused("Zm 9v", SB_B64_STD, 5);
  refused("Zm9v YmFy", SB_B64_STD, 9);
  refused(" Zm9v", SB_B64_STD, 5);
  refused("Zm9v\nYmF", SB_B64_STD, 4);
  refused("Zm-v", SB_B64_STD, 2);       /* URL alphabet in standard */
  refused("Zm_v", SB_B64_STD, 2);
  refused("Zm+v", SB_B64_URL, 2);       /* standard alphabet in URL */
  refused("Zm/v", SB_B64_URL, 2);
  refused("Z", SB_B64_URL, 1);          /* 1 mod 4: no encoder produces it */
  refused("Zm9vY", SB_B64_URL, 5);
  refused("Zg=", SB_B64_URL, 2);        /* partial padding */
  refused("Zh", SB_B64_URL, 1);
  refused("Zm9v\x80", SB_B64_STD, 5);
  refused("Zm9v\xff\xff\xff\xff", SB_B64_STD, 4);
  /* An embedded NUL is a character outside the alphabet. */
  size_t len, bad;
  const char with_nul[] = "Zm\0v";
  uint8_t *d = decode(with_nul, 4, SB_B64_STD, &len, &bad);
  CHECK(d == NULL && bad == 2, "NUL inside base64 refused at 2 (bad_at %zu)", bad);
  free(d);
}

int main(void) {
  test_rfc4648_vectors();
  test_round_trips();
  test_invalid_input();
  if (failures != 0) {
    fprintf(stderr, "%d check(s) failed\n", failures);
    return 1;
  }
  puts("base64: ok");
  return 0;
}
