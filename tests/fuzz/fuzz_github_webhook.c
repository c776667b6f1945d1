/* fuzz_github_webhook: libFuzzer target for what the bot reads from GitHub's webhook deliveries
 * once their signature checked (POST /github/webhook): review comments
 * (lua/switchboard/fronts/slack/review.lua), issues and their comments
 * (fronts/github/issues.lua), pull requests opened (fronts/github/pulls.lua), and the review
 * agent's answer read into line comments (dispatch/pr_review.lua).
 *
 * The readers are Lua, so this target embeds the interpreter like fuzz_slack_context.c. Each
 * input is used twice, as every event's payload: as JSON text (lua-cjson decodes it as the
 * listener does) and as a recipe for a table of any shape built from the bytes (keys GitHub
 * uses, values of every type), because the Lua side gives libFuzzer no coverage signal (hence
 * -len_control=0); the input is also the agent's answer. A reader must never raise, and what
 * it accepts must have the shape its callers use: a repository string, an integer number, a
 * key that is a string.
 *
 * Build: CC=clang cmake -S . -B build-fuzz -DSB_FUZZ=ON && cmake --build build-fuzz --target fuzz_github_webhook
 * Run:   build-fuzz/tests/fuzz/fuzz_github_webhook -len_control=0 -max_len=4096 -max_total_time=60 \
 *          tests/fuzz/corpus/github_webhook */
#include "lua_harness.h"

#include <stddef.h>
#include <stdint.h>

static const char harness[] =
    "local cjson = require('cjson')\n"
    "local core = require('switchboard.core')\n"
    "local review = require('switchboard.fronts.slack.review')\n"
    "local issues = require('switchboard.fronts.github.issues')\n"
    "local pulls = require('switchboard.fronts.github.pulls')\n"
    "local pr_review = require('switchboard.dispatch.pr_review')\n"
    "local BOT = 'switchboard[bot]'\n"
    "local IPOL = { repositories = { 'acme/api' }, start_on = { 'opened', 'assigned', 'mention' },\n"
    "               allow_associations = { 'OWNER', 'MEMBER' } }\n"
    "local PPOL = { repositories = { 'acme/api' }, actions = { 'opened', 'ready_for_review' } }\n"
    "local RPOL = { mention = { '@switchboard' }, allow_associations = { 'OWNER', 'MEMBER' } }\n"
    "local ATOMS = { 'x', '', 0, 1, 1.5, -1, 2^53, true, false, cjson.null, 'acme/api', 'opened', 'assigned',\n"
    "                'created', 'submitted', 'ready_for_review', BOT, 'Bot', 'MEMBER', '@switchboard fix',\n"
    "                '2026-12-01T19:00:00Z', '9999-99-99T99:99:99+99:99', ('\\xC3'):rep(3) }\n"
    "local KEYS = { 'action', 'repository', 'full_name', 'issue', 'comment', 'pull_request', 'review', 'id',\n"
    "               'number', 'title', 'body', 'html_url', 'user', 'login', 'type', 'author_association',\n"
    "               'created_at', 'updated_at', 'submitted_at', 'assignee', 'sender', 'draft', 'head', 'base',\n"
    "               'ref', 'sha', 'path', 'line', 'original_line', 'diff_hunk' }\n"
    "local function generate(input)\n"
    "  local parts = { input }\n"
    "  for i = 1, 16 do parts[#parts + 1] = core.crypto.sha256(input .. i) end\n"
    "  local data = table.concat(parts)\n"
    "  local pos = 0\n"
    "  local function byte() pos = pos + 1; return data:byte(pos) or 0 end\n"
    "  local function any(depth)\n"
    "    local b = byte()\n"
    "    if depth > 3 or b % 3 ~= 0 then\n"
    "      local a = (b // 3) % (#ATOMS + 1)\n"
    "      if a == #ATOMS then local s = data:sub(pos + 1, pos + 8); pos = pos + 8; return s end\n"
    "      return ATOMS[a + 1]\n"
    "    end\n"
    "    local t = {}\n"
    "    for i = 1, byte() % 3 do t[i] = any(depth + 1) end\n"
    "    for _ = 1, byte() % 8 do t[KEYS[byte() % #KEYS + 1]] = any(depth + 1) end\n"
    "    return t\n"
    "  end\n"
    "  if byte() % 7 == 0 then return any(0) end\n"
    "  local doc = {}\n"
    "  for _, k in ipairs({ 'action', 'repository', 'issue', 'comment', 'pull_request', 'review', 'assignee', 'sender' }) do\n"
    "    if byte() % 3 ~= 0 then doc[k] = any(1) end\n"
    "  end\n"
    "  return doc\n"
    "end\n"
    "local EVENTS = { 'issues', 'issue_comment', 'pull_request', 'pull_request_review',\n"
    "                 'pull_request_review_comment', 'push' }\n"
    "local function check(p)\n"
    "  for _, ev in ipairs(EVENTS) do\n"
    "    local c = review.read(ev, p, RPOL, 1764615600, 3600)\n"
    "    if c then assert(type(c.repo) == 'string' and type(c.body) == 'string'); review.ask_text(c) end\n"
    "    local k = review.seen_key(ev, p)\n"
    "    assert(k == nil or type(k) == 'string')\n"
    "    local i = issues.read(ev, p, IPOL, BOT, 1764615600, 1e12)\n"
    "    if i then\n"
    "      assert(i.repo == 'acme/api' and math.type(i.number) == 'integer', 'an issue without its place')\n"
    "      assert(type(issues.ask_text(i, { { user = 'u', body = tostring(p) } })) == 'string')\n"
    "      issues.thread(i.repo, i.number)\n"
    "    end\n"
    "    k = issues.seen_key(ev, p)\n"
    "    assert(k == nil or type(k) == 'string')\n"
    "    local pr = pulls.read(ev, p, PPOL, BOT)\n"
    "    if pr then\n"
    "      assert(pr.repo == 'acme/api' and math.type(pr.number) == 'integer', 'a pull request without its place')\n"
    "      assert(type(pulls.ask_text(pr)) == 'string')\n"
    "    end\n"
    "    k = pulls.seen_key(ev, p)\n"
    "    assert(k == nil or type(k) == 'string')\n"
    "  end\n"
    "end\n"
    "return function(data)\n"
    "  local ok, doc = pcall(cjson.decode, data)\n"
    "  check(ok and doc or data)\n"
    "  check(generate(data))\n"
    "  local body, comments = pr_review.parse(data)\n"
    "  assert(type(body) == 'string' and type(comments) == 'table')\n"
    "  for _, c in ipairs(comments) do\n"
    "    assert(type(c.path) == 'string' and c.path ~= '' and math.type(c.line) == 'integer' and c.body ~= '')\n"
    "  end\n"
    "end\n";

SB_FUZZ_LUA_TARGET("fuzz_github_webhook", harness)
