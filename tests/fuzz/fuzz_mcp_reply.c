/* fuzz_mcp_reply: libFuzzer target for what an MCP server and a web page send the bot
 * (docs/mcp.md, docs/agent.md "web_fetch"): lua/switchboard/agent/mcp/http.lua's reading of a
 * streamable-HTTP reply (a JSON body, a batch, or an SSE stream), protocol.lua's reply lookup,
 * tool names and tools/call content, and agent/html_markdown.lua's conversion of a page.
 *
 * The readers are Lua, so this target embeds the interpreter like fuzz_connect.c. Each input
 * is read as an SSE stream and as a JSON body; every message that comes out is looked up as a
 * reply and, when it has a result, made into tool_result content; its fields make a tool name
 * that must match the API's rule ^[a-zA-Z0-9_-]{1,64}$. The same bytes are converted as HTML:
 * nothing may raise, and the markdown is at most a bounded multiple of the input.
 *
 * Build: CC=clang cmake -S . -B build-fuzz -DSB_FUZZ=ON && cmake --build build-fuzz --target fuzz_mcp_reply
 * Run:   build-fuzz/tests/fuzz/fuzz_mcp_reply -max_len=4096 -max_total_time=60 tests/fuzz/corpus/mcp_reply */
#include "lua_harness.h"

#include <stddef.h>
#include <stdint.h>

static const char harness[] =
    "local http = require('switchboard.agent.mcp.http')\n"
    "local protocol = require('switchboard.agent.mcp.protocol')\n"
    "local html_markdown = require('switchboard.agent.html_markdown')\n"
    "local function check_messages(msgs)\n"
    "  assert(type(msgs) == 'table', 'messages is not a table')\n"
    "  for _, id in ipairs({ 'sbmcp-call', 'sbmcp-init', 1 }) do\n"
    "    local result, err = protocol.answer(msgs, id)\n"
    "    assert(result ~= nil or err ~= nil, 'no result and no error')\n"
    "    if result then\n"
    "      local content, is_error = protocol.content(result)\n"
    "      assert(type(content) == 'string' or type(content) == 'table', 'bad content')\n"
    "      assert(type(is_error) == 'boolean', 'bad is_error')\n"
    "    end\n"
    "  end\n"
    "  for _, m in ipairs(msgs) do\n"
    "    if type(m) == 'table' then\n"
    "      local name = protocol.tool_name(tostring(m.method), tostring(m.id))\n"
    "      assert(#name >= 1 and #name <= 64 and name:match('^[a-zA-Z0-9_-]+$'), 'tool name breaks the rule: ' .. name)\n"
    "    end\n"
    "  end\n"
    "end\n"
    "return function(data)\n"
    "  check_messages(http.messages('text/event-stream', data))\n"
    "  check_messages(http.messages('application/json', data))\n"
    "  check_messages(protocol.decode_lines(data))\n"
    "  local md = html_markdown.convert(data, 'https://example.com/a/b')\n"
    "  assert(type(md) == 'string', 'markdown is not a string')\n"
    "  assert(#md <= 8 * #data + 64, 'markdown grew past a bound: ' .. #md .. ' from ' .. #data)\n"
    "end\n";

SB_FUZZ_LUA_TARGET("fuzz_mcp_reply", harness)
