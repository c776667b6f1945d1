/* core.crypto: internal declarations shared by the crypto module's files. */
#ifndef SB_CRYPTO_H
#define SB_CRYPTO_H

#include <lua.h>

/* Sets core.crypto (crypto.c). */
int sb_crypto_open(lua_State *L);

/* Sets rs256_sign, rs256_verify and rsa_generate on the table at the top of the stack. */
void sb_crypto_rsa_fields(lua_State *L);

/* Sets aes256gcm_seal and aes256gcm_open on the table at the top of the stack (gcm.c). */
void sb_crypto_gcm_fields(lua_State *L);

/* Pushes `nil, {kind="crypto", message=…}`: `what` followed by the reason of the oldest
 * OpenSSL error in the queue (its static reason text only — never the error's data field,
 * which could quote input), then clears the queue so nothing stale reaches libcurl's TLS. */
int sb_crypto_fail(lua_State *L, const char *what);

#endif
