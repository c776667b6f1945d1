-- The bot's /readyz sandbox check (fronts/slack/readiness.lua) against a real loopback HTTP
-- server answering sandboxd's /healthz: its cache and probe bounds are policies/timeouts.lua
-- readiness.cache_ms and readiness.probe_ms, read at each check (a reload applies at once).
local core = require("switchboard.core")
local readiness = require("switchboard.fronts.slack.readiness")

describe("readiness: the sandbox probe", function()
  it("is cached for readiness.cache_ms and given readiness.probe_ms, both read at each check", function()
    core.run(function()
      local hits = 0
      local srv = assert(core.http.serve{ host = "127.0.0.1", port = 0, handler = function(req, res)
        if req.path == "/healthz" then hits = hits + 1 end
        res:send(200, { ["content-type"] = "application/json" }, '{"ok":true}')
      end })
      local timeouts = { readiness = { cache_ms = 60000, probe_ms = 4321 } }
      local deadlines = {}
      local r = readiness.new{ policy = function() return { version = "v1", timeouts = timeouts } end,
        sandbox_urls = { "http://127.0.0.1:" .. srv.port }, sandbox_token = "t",
        request = function(req) deadlines[#deadlines + 1] = req.deadline_ms; return core.http.request(req) end }
      assert.is_true((r:check()))
      assert.is_true((r:check()))
      assert.equal(1, hits) -- the second within cache_ms: the first's answer
      assert.same({ 4321 }, deadlines)
      timeouts.readiness = { cache_ms = 0, probe_ms = 1234 } -- a reload
      assert.is_true((r:check()))
      assert.is_true((r:check()))
      assert.equal(3, hits)
      assert.same({ 4321, 1234, 1234 }, deadlines)
      srv:close()
    end)
  end)
end)
