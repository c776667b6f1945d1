/* A line hook that feeds libFuzzer's extra counters (lua_coverage.h). */
#include "lua_coverage.h"

#include <stdint.h>
#include <string.h>

/* libFuzzer reads every byte of this section as a counter after each input (Linux: it finds
 * the section by the linker's __start_/__stop_ symbols). Lines and edges hash into it; a
 * collision only merges two features. */
enum { COUNTERS = 1 << 16 };
__attribute__((section("__libfuzzer_extra_counters"), used))
static uint8_t counters[COUNTERS];

/* A chunk's source name → a hash of its text, cached by the name's address: the names are
 * interned strings a loaded function keeps alive, and hashing the text (not the address)
 * numbers a line the same in every run, so saved corpora keep their meaning. */
enum { NAME_SLOTS = 1024 };
static struct {
  const char *name;
  uint32_t hash;
} names[NAME_SLOTS];

static uint32_t fnv1a(const char *s) {
  uint32_t h = 2166136261u;
  for (; *s; s++)
    h = (h ^ (uint8_t)*s) * 16777619u;
  return h;
}

static uint32_t chunk_hash(const char *name) {
  size_t slot = ((uintptr_t)name >> 4) % NAME_SLOTS;
  if (names[slot].name != name) {
    names[slot].name = name;
    names[slot].hash = fnv1a(name);
  }
  return names[slot].hash;
}

static void bump(uint32_t index) {
  uint8_t *c = &counters[index % COUNTERS];
  if (*c != UINT8_MAX)
    (*c)++;
}

static uint32_t previous; /* the last line's key, shifted (AFL's edge trick: A→B ≠ B→A) */

static void on_line(lua_State *L, lua_Debug *ar) {
  if (!lua_getinfo(L, "S", ar))
    return;
  uint32_t line = chunk_hash(ar->source) ^ ((uint32_t)ar->currentline * 2654435761u);
  bump(line);
  bump((line ^ previous) * 40503u + 1);
  previous = line >> 1;
}

void sb_lua_coverage_attach(lua_State *L) { lua_sethook(L, on_line, LUA_MASKLINE, 0); }
