-- store/record.lua on the real engine (core.store) and pages/render.lua over what it keeps.
package.cpath = (os.getenv("SB_BUILD_DIR") or "./build") .. "/lua/?.so;" .. package.cpath
package.path = "lua/?.lua;lua/?/init.lua;" .. package.path
local core = require("switchboard.core")
local async = require("tests.lua.support.async")
local record = require("switchboard.store.record")
local render = require("switchboard.pages.render")

local function tmpdir() return require("support.tmp").dir("store") end

describe("the thread's record", function()
  local dir
  before_each(function() dir = tmpdir() end)
  after_each(function() os.execute("rm -rf '" .. dir .. "'") end)

  it("keeps a conversation, appending what is new and rewriting a compacted one", async(function()
    local rec = assert(record.open(dir .. "/r.db"))
    local msgs = { { role = "user", content = "one" }, { role = "assistant", content = { { type = "text", text = "1" } } } }
    local mark = assert(rec:save_conversation("t", msgs))
    msgs[3] = { role = "user", content = "two" }
    mark = assert(rec:save_conversation("t", msgs, mark))
    assert.same(msgs, rec:conversation("t"))
    local compacted = { { role = "user", content = "summary" } }
    assert(rec:save_conversation("t", compacted, mark))
    assert.same(compacted, rec:conversation("t"))
    rec:close()
    local again = assert(record.open(dir .. "/r.db"))
    assert.same(compacted, again:conversation("t"))
    again:close()
  end))

  it("claims a seen key once while it lives, for every connection to the file, and expires it", async(function()
    local clock = 1000000
    local a = assert(record.open(dir .. "/r.db", { wall_ms = function() return clock end }))
    local b = assert(record.open(dir .. "/r.db", { wall_ms = function() return clock end })) -- the other process
    assert.is_true(a:claim("slack.event:Ev1", 60000))
    assert.is_false(a:claim("slack.event:Ev1", 60000))
    assert.is_false(b:claim("slack.event:Ev1", 60000))
    assert.is_true(b:claim("slack.event:Ev2", 60000))
    clock = clock + 60001 -- past its window: the key may be taken again
    assert.is_true(b:claim("slack.event:Ev1", 60000))
    assert.is_false(a:claim("slack.event:Ev1", 60000))
    clock = clock + 120000
    assert(a:expire(0))
    assert.same({ { n = 0 } }, a.db:run("SELECT count(*) AS n FROM seen"))
    a:close()
    b:close()
  end))

  it("scrubs registered secrets from everything it writes", async(function()
    local secret = "sk-ant-record-" .. core.crypto.hex(core.crypto.random_bytes(8))
    core.log_redact(secret)
    local rec = assert(record.open(dir .. "/r.db"))
    assert(rec:save_conversation("t", { { role = "user", content = "key " .. secret } }))
    local run = assert(rec:run_start{ thread = "t", ask = "use " .. secret, agent = "coding", model = "m" })
    assert(rec:event(run, { type = "tool_result", id = "x", name = "bash", content = "printed " .. secret }))
    assert(rec:run_end(run, { outcome = "done", answer = secret }))
    rec:close()
    local f = io.popen("cat " .. dir .. "/r.db*")
    local bytes = f:read("a")
    f:close()
    assert.is_nil(bytes:find(secret, 1, true))
    assert.is_nil(bytes:find(run.token, 1, true), "the page token itself is kept")
  end))

  -- a run the bot died in (no run_end) still counts its cost so far towards the spend caps
  it("keeps each run's cost so far and gives the spend per thread and per run since a time", async(function()
    local rec = assert(record.open(dir .. "/r.db"))
    local killed = assert(rec:run_start{ thread = "T1/C1/1.0", ask = "a", agent = "coding", model = "m" })
    assert(rec:run_cost(killed, 0.25))
    rec:close()
    local again = assert(record.open(dir .. "/r.db"))
    assert(again:threads()) -- marks the killed run interrupted
    local ended = assert(again:run_start{ thread = "T1/C1/1.0", ask = "b", agent = "coding", model = "m" })
    assert(again:run_cost(ended, 0.1))
    assert(again:run_end(ended, { outcome = "done", cost = 0.5 }))
    local other = assert(again:run_start{ thread = "T1/C2/2.0", ask = "c", agent = "coding", model = "m" })
    assert(again:run_end(other, { outcome = "model_error" })) -- no cost: the one saved is kept (none here)
    local s = assert(again:spend(core.wall_ms() - 60000))
    assert.equal(1, #s.threads)
    assert.equal("T1/C1/1.0", s.threads[1].thread)
    assert.near(0.75, s.threads[1].cost, 1e-9)
    assert.equal(2, #s.runs)
    assert.equal(0, #assert(again:spend(core.wall_ms() + 60000)).runs)
    again:close()
  end))

  it("gives a run's page by its token only, and renders it escaped", async(function()
    local rec = assert(record.open(dir .. "/r.db"))
    local run = assert(rec:run_start{ thread = "t", ask = "fix <it>", agent = "coding", model = "m" })
    assert(rec:event(run, { type = "answer", turn = 1, usage = { input_tokens = 5, output_tokens = 2 },
      content = { { type = "text", text = "looking" }, { type = "tool_use", id = "u1", name = "bash", input = { command = "echo <b>" } } } }))
    assert(rec:event(run, { type = "tool_result", turn = 1, id = "u1", name = "bash", content = "<b>", duration_ms = 3.25 }))
    assert(rec:event(run, { type = "compaction", turn = 2, how = "summary", kept = 2, before = 9000, after = 800,
      summary = "we <did> things" }))
    assert(rec:event(run, { type = "answer", turn = 2, usage = { input_tokens = 3, output_tokens = 1,
      cache_read_input_tokens = 1200, cache_creation_input_tokens = 40 },
      content = { { type = "thinking", thinking = "hmm <x>", signature = "s" }, { type = "text", text = "done" } } }))
    assert(rec:run_end(run, { outcome = "done", turns = 2, tokens_in = 8, tokens_out = 3, cost = 0.0123, answer = "ok" }))
    assert.is_nil((rec:page(("0"):rep(32))))
    local r, events, thread = rec:page(run.token)
    assert.equal("done", r.outcome)
    local html = render.page(r, events, thread, { tool_open_bytes = 100 })
    assert.matches("fix &lt;it&gt;", html, 1, true)
    assert.matches("echo &lt;b&gt;", html, 1, true)
    assert.is_nil(html:find("<b>", 1, true))
    -- the cost, the prompt cache's reads and writes, the compactions, thinking collapsed
    assert.matches("<dt>cost</dt><dd>$0.0123</dd>", html, 1, true)
    assert.matches("<dt>prompt cache</dt><dd>1,200 tokens read / 40 written</dd>", html, 1, true)
    assert.matches("<dt>compactions</dt><dd>1</dd>", html, 1, true)
    assert.matches("Compaction before turn 2", html, 1, true)
    assert.matches("latest 2 messages kept (~9000 → ~800 tokens)", html, 1, true)
    assert.matches("we &lt;did&gt; things", html, 1, true)
    assert.matches("<summary>thinking (7 bytes)</summary><pre>hmm &lt;x&gt;</pre>", html, 1, true)
    assert(rec:expire(core.wall_ms() + 1000))
    assert.is_nil((rec:page(run.token)))
    rec:close()
  end))
  it("serves a page on the HTTP server only for its token and only while policy serves pages", async(function()
    local routes = require("switchboard.pages.routes")
    local rec = assert(record.open(dir .. "/r.db"))
    local run = assert(rec:run_start{ thread = "t", ask = "the ask", agent = "coding", model = "m" })
    assert(rec:run_end(run, { outcome = "done", turns = 0 }))
    local pages = { enabled = true, tool_open_bytes = 100 }
    local handler = routes.handler{ record = rec, policy = function() return { record = { pages = pages } } end }
    local srv = assert(core.http.serve{ host = "127.0.0.1", port = 0, handler = function(req, res)
      if not handler(req, res) then res:send(418, {}, "not a page route\n") end
    end })
    local base = ("http://127.0.0.1:%d"):format(srv.port)
    local function get(path, method)
      local status, headers, body = core.http.request{ method = method or "GET", url = base .. path, deadline_ms = 10000 }
      return status, headers, body
    end
    local status, headers, body = get("/runs/" .. run.token)
    assert.equal(200, status)
    assert.matches("^text/html", headers["content-type"])
    assert.matches("the ask", body, 1, true)
    assert.equal(404, (get("/runs/" .. ("f"):rep(32))))
    assert.equal(404, (get("/runs/" .. run.token:sub(1, 31))))
    assert.equal(404, (get("/runs/" .. ("g"):rep(32))))
    assert.equal(404, (get("/runs/" .. run.token .. "/x")))
    assert.equal(405, (get("/runs/" .. run.token, "POST")))
    assert.equal(418, (get("/healthz")))
    pages.enabled = false
    assert.equal(404, (get("/runs/" .. run.token)))
    srv:close()
    rec:close()
  end))
end)
