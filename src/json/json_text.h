/* Command output as a JSON string in one pass (issue 28): escaping and the UTF-8 check together,
 * each byte that does not start a valid UTF-8 sequence (RFC 3629: no overlong forms, no
 * surrogates, nothing past U+10FFFF — what Lua's utf8.len accepts) replaced by U+FFFD. Pure: no
 * Lua, no libuv; the fuzz target drives it directly. */
#ifndef SB_JSON_TEXT_H
#define SB_JSON_TEXT_H

#include <stdbool.h>
#include <stddef.h>

/* Length of the valid UTF-8 sequence starting at s[0] (1-4), or 0 when s[0] starts none. */
size_t sb_utf8_sequence(const unsigned char *s, size_t n);

/* Writes "…" (quotes included) for s[0..n) through emit(ctx, bytes, len), clean runs in one call
 * each. Returns true when s was valid UTF-8 (nothing was replaced). */
typedef void (*sb_json_emit)(void *ctx, const char *bytes, size_t len);
bool sb_json_string(const char *s, size_t n, sb_json_emit emit, void *ctx);

/* The inside of that literal (no quotes) for a piece of a stream that arrives in parts (the exec
 * lane writes a long stdout as it comes, docs/sandboxd.md): writes s[0..k) and returns k, which
 * is n unless the piece ends inside a UTF-8 sequence the next bytes could complete (!final: that
 * sequence, at most 3 bytes, is left to the next call, which starts at s + k). Pieces fed so,
 * then the last with final, write exactly what sb_json_string writes inside its quotes for the
 * whole. *valid is set false when a byte was replaced (and never set true). */
size_t sb_json_text_part(const char *s, size_t n, bool final, bool *valid, sb_json_emit emit,
                         void *ctx);

/* The most bytes sb_json_text_into writes for one byte of input (a control byte's \u00XX). */
#define SB_JSON_TEXT_MAX_GROWTH 6

/* sb_json_text_part writing straight into dst, which has room for SB_JSON_TEXT_MAX_GROWTH * n
 * bytes: no call per clean run or escape (the exec lane's stream, where a newline every line
 * made ~13,000 of them a megabyte). Returns the bytes taken as sb_json_text_part does, and sets
 * *written; the bytes written are exactly the ones sb_json_text_part would emit. */
size_t sb_json_text_into(char *dst, const char *s, size_t n, bool final, bool *valid,
                         size_t *written);

/* The writers sb_json_text_into chooses among (the widest the CPU runs), by name for the fuzz
 * target and bench/json_text_bench.c, which hold each to the same bytes: BYTES is
 * sb_json_text_part's own byte loop; SSE2 and AVX2 store 16 or 32 input bytes at a time and stop
 * only at a byte that needs a look of its own. The room asked of dst is the same. */
typedef enum { SB_JSON_TEXT_BYTES, SB_JSON_TEXT_SSE2, SB_JSON_TEXT_AVX2 } sb_json_text_writer;
bool sb_json_text_writer_available(sb_json_text_writer writer);
size_t sb_json_text_into_with(sb_json_text_writer writer, char *dst, const char *s, size_t n,
                              bool final, bool *valid, size_t *written);

#endif
