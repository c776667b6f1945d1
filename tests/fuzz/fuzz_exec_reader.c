/* fuzz_exec_reader: libFuzzer target for the exec lane's C reader of an /exec body
 * (src/lane/exec_body.c through core.exec_lane.read_body; docs/sandboxd.md "The exec lane"),
 * held to core.json.decode (lua-cjson), which the Lua path reads the same body with.
 *
 * Each input is used twice:
 *   1. as the raw body: whenever the reader takes it, core.json.decode must decode it to an
 *      object with exactly the fields the reader gave — the same command, network and env
 *      strings byte for byte, the same timeoutMs number;
 *   2. as a recipe for an object of the lane's fields whose string literals are built from
 *      escape fragments (every short escape, \uXXXX in both cases, surrogate pairs, lone and
 *      mismatched surrogates, bad hex, raw control and non-UTF-8 bytes), numbers from JSON's
 *      grammar and outside it, and names that may repeat. Besides the check of 1, when every
 *      fragment is valid JSON, every number is in JSON's grammar and no name repeats, the reader
 *      must take it (else the lane would leave ordinary bodies to Lua).
 * Any disagreement aborts.
 *
 * Build: CC=clang cmake -S . -B build-fuzz -DSB_FUZZ=ON && cmake --build build-fuzz --target fuzz_exec_reader
 * Run:   build-fuzz/tests/fuzz/fuzz_exec_reader -len_control=0 -max_len=4096 -max_total_time=60 \
 *          tests/fuzz/corpus/exec_reader */
#include "lua_harness.h"

#include <stddef.h>
#include <stdint.h>

static const char harness[] =
    "local core = require('switchboard.core')\n"
    "local json = core.json\n"
    "local function same_env(a, b)\n"
    "  for k, v in pairs(a) do if b[k] ~= v then return false end end\n"
    "  for k, v in pairs(b) do if a[k] ~= v then return false end end\n"
    "  return true\n"
    "end\n"
    /* the reader's reading, checked against decode's; returns whether the reader took it */
    "local function check(body)\n"
    "  local mine = core.exec_lane.read_body(body)\n"
    "  if mine == nil then return false end\n"
    "  local doc = json.decode(body)\n"
    "  assert(type(doc) == 'table', 'the reader took a body decode refuses')\n"
    "  for k, v in pairs(doc) do\n"
    "    if k == 'env' then\n"
    "      assert(type(v) == 'table' and getmetatable(v) == nil and same_env(v, mine.env), 'env')\n"
    "    else\n"
    "      assert(mine[k] == v and math.type(mine[k]) == math.type(v), 'field ' .. tostring(k))\n"
    "    end\n"
    "  end\n"
    "  for k in pairs(mine) do assert(doc[k] ~= nil, 'a field decode has not: ' .. k) end\n"
    "  return true\n"
    "end\n"
    /* the recipe: bytes → (body, whether it is strict JSON of the lane's shape, no name twice) */
    "local VALID = { [[\\\"]], [[\\\\]], [[\\/]], [[\\b]], [[\\f]], [[\\n]], [[\\r]], [[\\t]], 'a', ' ',\n"
    "  '\\1', '\\31', '\\127', '\\195\\169', '\\255', [[\\u0000]], [[\\u00e9]], [[\\u20AC]], [[\\uffff]],\n"
    "  [[\\ud83d\\ude00]], [[\\uDBFF\\uDFFF]], [[\\ud800\\udc00]] }\n"
    "local INVALID = { [[\\x]], [[\\u12G4]], [[\\ud800]], [[\\udc00]], [[\\ud800\\u0041]], [[\\ud83d\\ud83d]],\n"
    "  [[\\ud800x]], [[\\u12]], '\\0', '\"', [[\\]] }\n"
    "local NUMBERS = { '0', '-0', '7', '1234.5', '-3.25e2', '9e99', '1e400', '-1e400', '0.1', '2E+3',\n"
    "  '4.9e-324', '123456789012345678901234567890' }\n"
    "local LENIENT = { '-.5', '1.', '+1', '01', '0x10', 'NaN', 'Infinity', '1e', '--1', '.5' }\n"
    "local NAMES = { 'A', 'B', 'PATH', '_X', 'a', '' }\n"
    "local function recipe(data)\n"
    "  local i, strict = 0, true\n"
    "  local function byte() i = i + 1; return data:byte(i) or 0 end\n"
    "  local function pick(list) local b = byte(); return list[b % #list + 1] end\n"
    "  local function literal()\n"
    "    local parts = {}\n"
    "    for j = 1, byte() % 6 do\n"
    "      if byte() % 16 == 0 then parts[j] = pick(INVALID); strict = false else parts[j] = pick(VALID) end\n"
    "    end\n"
    "    return '\"' .. table.concat(parts) .. '\"'\n"
    "  end\n"
    "  local members, seen_env = {}, {}\n"
    "  members[1] = '\"command\":' .. literal()\n"
    "  if byte() % 2 == 0 then\n"
    "    if byte() % 8 == 0 then members[#members + 1] = '\"timeoutMs\":' .. pick(LENIENT); strict = false\n"
    "    else members[#members + 1] = '\"timeoutMs\":' .. pick(NUMBERS) end\n"
    "  end\n"
    "  if byte() % 2 == 0 then members[#members + 1] = '\"network\":' .. literal() end\n"
    "  if byte() % 2 == 0 then\n"
    "    local pairs_ = {}\n"
    "    for j = 1, byte() % 4 do\n"
    "      local name\n"
    "      if byte() % 2 == 0 then name = '\"' .. pick(NAMES) .. '\"' else name = literal() end\n"
    "      local value = literal()\n"
    "      pairs_[j] = name .. ':' .. value\n"
    "      local decoded = strict and json.decode(name) or nil\n"
    "      if decoded ~= nil then\n"
    "        if seen_env[decoded] then strict = false end\n"
    "        seen_env[decoded] = true\n"
    "      end\n"
    "    end\n"
    "    members[#members + 1] = '\"env\":{' .. table.concat(pairs_, ',') .. '}'\n"
    "  end\n"
    "  if byte() % 16 == 0 then members[#members + 1] = members[1]; strict = false end\n"
    "  return '{' .. table.concat(members, ',') .. '}', strict\n"
    "end\n"
    "return function(data)\n"
    "  check(data)\n"
    "  local body, strict = recipe(data)\n"
    "  local took = check(body)\n"
    "  assert(took or not strict, 'the reader left a strict body of the lane shape')\n"
    "end\n";

SB_FUZZ_LUA_TARGET("fuzz_exec_reader", harness)
