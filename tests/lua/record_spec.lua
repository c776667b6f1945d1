-- store/record.lua on the real engine (core.store) and pages/render.lua over what it keeps.
package.cpath = (os.getenv("SB_BUILD_DIR") or "./build") .. "/lua/?.so;" .. package.cpath
package.path = "lua/?.lua;lua/?/init.lua;" .. package.path
local core = require("switchboard.core")
local async = require("tests.lua.support.async")
local record = require("switchboard.store.record")
local render = require("switchboard.pages.render")

local function tmpdir()
  local p = assert(io.popen("mktemp -d"))
  local d = p:read("l")
  p:close()
  return d
end

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

  it("gives a run's page by its token only, and renders it escaped", async(function()
    local rec = assert(record.open(dir .. "/r.db"))
    local run = assert(rec:run_start{ thread = "t", ask = "fix <it>", agent = "coding", model = "m" })
    assert(rec:event(run, { type = "answer", turn = 1, usage = { input_tokens = 5, output_tokens = 2 },
      content = { { type = "text", text = "looking" }, { type = "tool_use", id = "u1", name = "bash", input = { command = "echo <b>" } } } }))
    assert(rec:event(run, { type = "tool_result", turn = 1, id = "u1", name = "bash", content = "<b>", duration_ms = 3.25 }))
    assert(rec:run_end(run, { outcome = "done", turns = 1, tokens_in = 5, tokens_out = 2, answer = "ok" }))
    assert.is_nil((rec:page(("0"):rep(32))))
    local r, events, thread = rec:page(run.token)
    assert.equal("done", r.outcome)
    local html = render.page(r, events, thread, { tool_open_bytes = 100 })
    assert.matches("fix &lt;it&gt;", html, 1, true)
    assert.matches("echo &lt;b&gt;", html, 1, true)
    assert.is_nil(html:find("<b>", 1, true))
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
