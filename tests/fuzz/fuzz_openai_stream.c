/* fuzz_openai_stream: libFuzzer target for what an OpenAI-compatible Chat Completions endpoint
 * streams to the model client (lua/switchboard/agent/providers/openai.lua): server-sent
 * `data:` events of chat.completion.chunk JSON and `[DONE]`, translated into the Messages API's
 * events and assembled by agent/stream.lua.
 *
 * Each input is used twice:
 *   1. as raw stream bytes, cut into pieces whose sizes come from the input's first bytes: the
 *      decoder must never raise, must give the same outcome split as whole (the same failure,
 *      or the same blocks), and a finished message must be well-formed (known block types; a
 *      tool_use with a string id and name and a table input);
 *   2. as a recipe for a well-formed stream of chunks (text, tool_calls deltas with odd
 *      indexes, ids, names and argument fragments, finish reasons, usage, errors), so mutation
 *      reaches the translator.
 *
 * Build: CC=clang cmake -S . -B build-fuzz -DSB_FUZZ=ON && cmake --build build-fuzz --target fuzz_openai_stream
 * Run:   build-fuzz/tests/fuzz/fuzz_openai_stream -len_control=0 -max_len=4096 -max_total_time=60 \
 *          tests/fuzz/corpus/openai_stream */
#include "lua_harness.h"

#include <stddef.h>
#include <stdint.h>

static const char harness[] =
    "local cjson = require('cjson')\n"
    "local openai = require('switchboard.agent.providers.openai')\n"
    "local stream = require('switchboard.agent.stream')\n"
    "local KNOWN = { text = true, tool_use = true }\n"
    SB_FUZZ_LUA_SPLIT
    "local function run(pieces)\n"
    "  local asm = stream.new{}\n"
    "  local dec = openai.new{ base_url = 'http://127.0.0.1/v1' }:decoder(asm, 2048)\n"
    "  for _, piece in ipairs(pieces) do\n"
    "    local ok, err = pcall(dec, piece)\n"
    "    if not ok then error('the decoder raised: ' .. tostring(err), 0) end\n"
    "    if err then return 'failed', asm end\n"
    "  end\n"
    "  local ok, err = pcall(dec, nil)\n"
    "  if not ok then error('the decoder raised at the end: ' .. tostring(err), 0) end\n"
    "  return 'read', asm\n"
    "end\n"
    "local function shape(asm)\n"
    "  local m = asm:message()\n"
    "  local out = {}\n"
    "  for _, b in ipairs(m.content) do\n"
    "    assert(KNOWN[b.type], 'a block of a type the translator never makes')\n"
    "    if b.type == 'tool_use' then\n"
    "      assert(type(b.id) == 'string' and type(b.name) == 'string' and type(b.input) == 'table', 'a malformed tool_use')\n"
    "    else\n"
    "      assert(type(b.text) == 'string', 'a text block without text')\n"
    "    end\n"
    "    out[#out + 1] = b.type .. ':' .. (b.text or b.name) .. ':' .. tostring(b.input_error)\n"
    "  end\n"
    "  return table.concat(out, '|') .. '/' .. tostring(asm.done) .. '/' .. tostring(m.stop_reason)\n"
    "end\n"
    "local function check(data, sizes)\n"
    "  local wo, wasm = run({ data })\n"
    "  local so, sasm = run(split(data, sizes))\n"
    "  assert(wo == so, 'split and whole input differ in outcome')\n"
    "  if wo == 'read' then assert(shape(wasm) == shape(sasm), 'split and whole input give other messages') end\n"
    "end\n"
    "local function recipe(data)\n"
    "  local i = 0\n"
    "  local function byte() i = i + 1; return data:byte(i) or 0 end\n"
    "  local function str() local n = byte() % 12; local s = data:sub(i + 1, i + n); i = i + n; return s end\n"
    "  local function any()\n"
    "    local k = byte() % 5\n"
    "    if k == 0 then return str() elseif k == 1 then return byte() elseif k == 2 then return cjson.null\n"
    "    elseif k == 3 then return { str() } end\n"
    "    return byte() % 2 == 0\n"
    "  end\n"
    "  local FIN = { 'stop', 'tool_calls', 'length', 'content_filter' }\n"
    "  local out = {}\n"
    "  for _ = 1, byte() % 10 do\n"
    "    local k, doc = byte() % 6, { id = 'chatcmpl-x', choices = { { index = 0, delta = {} } } }\n"
    "    local delta = doc.choices[1].delta\n"
    "    if k == 0 then delta.content = str()\n"
    "    elseif k == 1 then delta.tool_calls = { { index = byte() % 3, id = byte() % 2 == 0 and str() or nil,\n"
    "      ['function'] = { name = byte() % 4 ~= 0 and str() or any(), arguments = byte() % 3 ~= 0 and str() or any() } } }\n"
    "    elseif k == 2 then doc.choices[1].finish_reason = FIN[byte() % 4 + 1]\n"
    "    elseif k == 3 then doc.choices = {}; doc.usage = { prompt_tokens = any(), completion_tokens = byte(),\n"
    "      prompt_tokens_details = { cached_tokens = any() } }\n"
    "    elseif k == 4 then doc = { error = { message = any(), type = any() } }\n"
    "    else doc.choices[1].delta = any() end\n"
    "    local ok, text = pcall(cjson.encode, doc)\n"
    "    out[#out + 1] = 'data: ' .. (ok and text or '{}') .. '\\n\\n'\n"
    "  end\n"
    "  if byte() % 4 ~= 0 then out[#out + 1] = 'data: [DONE]\\n\\n' end\n"
    "  return table.concat(out)\n"
    "end\n"
    "return function(data)\n"
    "  local sizes = {}\n"
    "  for k = 1, 4 do sizes[k] = (data:byte(k) or 7) % 13 + 1 end\n"
    "  check(data:sub(5), sizes)\n"
    "  check(recipe(data), sizes)\n"
    "end\n";

SB_FUZZ_LUA_TARGET("fuzz_openai_stream", harness)
