/* fuzz_bedrock_stream: libFuzzer target for what Amazon Bedrock streams to the model client
 * (lua/switchboard/agent/providers/bedrock.lua): the AWS event-stream binary framing (prelude,
 * CRC32s, typed headers, payload) and the chunks' base64 `bytes` carrying the Messages API's
 * events into agent/stream.lua.
 *
 * Each input is used twice:
 *   1. as raw stream bytes, cut into pieces whose sizes come from the input's first bytes: the
 *      decoder must never raise, must give the same frames (or the same failure) split as
 *      whole, and the assembled message must be well-formed;
 *   2. as a recipe for well-formed frames (CRCs right, headers of every type, event and
 *      exception frames, chunk payloads whose bytes are stream events or not), so mutation
 *      reaches the header reader and the delivery past the CRC checks.
 *
 * Build: CC=clang cmake -S . -B build-fuzz -DSB_FUZZ=ON && cmake --build build-fuzz --target fuzz_bedrock_stream
 * Run:   build-fuzz/tests/fuzz/fuzz_bedrock_stream -len_control=0 -max_len=4096 -max_total_time=60 \
 *          tests/fuzz/corpus/bedrock_stream */
#include "lua_harness.h"

#include <stddef.h>
#include <stdint.h>

static const char harness[] =
    "local core = require('switchboard.core')\n"
    "local cjson = require('cjson')\n"
    "local bedrock = require('switchboard.agent.providers.bedrock')\n"
    "local stream = require('switchboard.agent.stream')\n"
    "local MAX = 2048\n"
    SB_FUZZ_LUA_SPLIT
    "local function run(pieces)\n"
    "  local feed, asm, seen = bedrock.frames(MAX), stream.new{}, {}\n"
    "  for _, piece in ipairs(pieces) do\n"
    "    local ok, frames, why = pcall(feed, piece)\n"
    "    if not ok then error('the framing raised: ' .. tostring(frames), 0) end\n"
    "    if not frames then return 'failed:' .. tostring(why), seen end\n"
    "    for _, f in ipairs(frames) do\n"
    "      assert(type(f.headers) == 'table' and type(f.payload) == 'string' and #f.payload <= MAX, 'a malformed frame')\n"
    "      local dok, err = pcall(bedrock.deliver, asm, f)\n"
    "      if not dok then error('delivery raised: ' .. tostring(err), 0) end\n"
    "      seen[#seen + 1] = f.payload .. '/' .. tostring(err and err.message)\n"
    "    end\n"
    "  end\n"
    "  local m = asm:message()\n"
    "  for _, b in ipairs(m.content) do assert(type(b.type) == 'string', 'a block without a type') end\n"
    "  return 'read', seen\n"
    "end\n"
    "local function check(data, sizes)\n"
    "  local wo, wseen = run({ data })\n"
    "  local so, sseen = run(split(data, sizes))\n"
    "  assert(wo == so, 'split and whole input differ in outcome: ' .. wo .. ' vs ' .. so)\n"
    "  if wo ~= 'read' then return end -- a failure drops its call's frames: the stream is retried whole\n"
    "  assert(#wseen == #sseen, 'split and whole input give other frames')\n"
    "  for i = 1, #wseen do assert(wseen[i] == sseen[i], 'a frame differs with the split') end\n"
    "end\n"
    "local function frame(headers, payload)\n"
    "  local total = 12 + #headers + #payload + 4\n"
    "  local prelude = string.pack('>I4I4', total, #headers)\n"
    "  prelude = prelude .. string.pack('>I4', bedrock.crc32(prelude))\n"
    "  local body = prelude .. headers .. payload\n"
    "  return body .. string.pack('>I4', bedrock.crc32(body))\n"
    "end\n"
    "local EVENTS = { '{\"type\":\"message_start\",\"message\":{\"id\":\"m\"}}',\n"
    "  '{\"type\":\"content_block_start\",\"index\":0,\"content_block\":{\"type\":\"text\",\"text\":\"\"}}',\n"
    "  '{\"type\":\"content_block_delta\",\"index\":0,\"delta\":{\"type\":\"text_delta\",\"text\":\"hi\"}}',\n"
    "  '{\"type\":\"content_block_start\",\"index\":1,\"content_block\":{\"type\":\"tool_use\",\"id\":\"t\",\"name\":\"bash\"}}',\n"
    "  '{\"type\":\"content_block_delta\",\"index\":1,\"delta\":{\"type\":\"input_json_delta\",\"partial_json\":\"{}\"}}',\n"
    "  '{\"type\":\"content_block_stop\",\"index\":1}', '{\"type\":\"message_stop\"}', 'not json' }\n"
    "local function recipe(data)\n"
    "  local i = 0\n"
    "  local function byte() i = i + 1; return data:byte(i) or 0 end\n"
    "  local function str() local n = byte() % 12; local s = data:sub(i + 1, i + n); i = i + n; return s end\n"
    "  local out = {}\n"
    "  for _ = 1, byte() % 6 do\n"
    "    local k = byte() % 4\n"
    "    local h, payload = '', str()\n"
    "    if k == 0 or k == 1 then\n"
    "      h = string.pack('>s1B>s2', ':message-type', 7, 'event') .. string.pack('>s1B>s2', ':event-type', 7, k == 0 and 'chunk' or str())\n"
    "      local ev = EVENTS[byte() % #EVENTS + 1]\n"
    "      payload = byte() % 3 == 0 and str() or cjson.encode({ bytes = core.crypto.base64_encode(ev), p = str() })\n"
    "    elseif k == 2 then\n"
    "      h = string.pack('>s1B>s2', ':message-type', 7, 'exception') .. string.pack('>s1B>s2', ':exception-type', 7, str())\n"
    "      payload = cjson.encode({ message = str() })\n"
    "    else\n"
    "      local t = byte() % 11\n"
    "      h = string.pack('>s1B', str(), t) .. str()\n"
    "    end\n"
    "    out[#out + 1] = frame(h, payload)\n"
    "  end\n"
    "  return table.concat(out)\n"
    "end\n"
    "return function(data)\n"
    "  local sizes = {}\n"
    "  for k = 1, 4 do sizes[k] = (data:byte(k) or 7) % 13 + 1 end\n"
    "  check(data:sub(5), sizes)\n"
    "  check(recipe(data), sizes)\n"
    "end\n";

SB_FUZZ_LUA_TARGET("fuzz_bedrock_stream", harness)
