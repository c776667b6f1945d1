-- Lines held and written together (core.log_batch; log.h sb_log_hold): a child Lua logs into a
-- real stderr pipe read here, and says on its stdout where it is. Info lines wait in it (the
-- window is a minute: nothing but the rules below can write them), a warn line writes them
-- and itself at once, in order, 4 KiB of held lines go without waiting, the timer writes them
-- when it is due, and the engine's shutdown and exit() leave nothing held.
local async = require("support.async")
local core = require("switchboard.core")

local function wait_for(pred, ms)
  local deadline = core.now_ms() + ms
  while core.now_ms() < deadline do
    local v = pred()
    if v then return v end
    core.sleep(10)
  end
  return pred()
end

-- Runs `body` (Lua source, inside core.run, with `core`, `say(word)` on stdout and
-- `await(name)`: waits for the file dir/name) in a child; returns its handle with .out() and
-- .err() (what it wrote so far), .go(name) (makes the file) and .wait().
local function child(body)
  local dir = assert(io.popen("mktemp -d")):read("l")
  local build = os.getenv("SB_BUILD_DIR") or "./build"
  local script = ([[
    package.cpath = %q .. "/lua/?.so;" .. package.cpath
    local core = require("switchboard.core")
    local dir = %q
    local function say(word) io.stdout:write(word, "\n"); io.stdout:flush() end
    local function await(name)
      while true do
        local f = io.open(dir .. "/" .. name)
        if f then f:close(); return end
        core.sleep(5)
      end
    end
    core.run(function() %s end)
  ]]):format(build, dir, body)
  local out, err = {}, {}
  local p = assert(core.spawn { argv = { "lua5.4", "-e", script }, deadline_ms = 60000,
    env = require("support.preload").env{ PATH = os.getenv("PATH") },
    on_output = function(stream, chunk)
      local t = stream == "stdout" and out or err
      t[#t + 1] = chunk
    end })
  return {
    out = function() return table.concat(out) end,
    err = function() return table.concat(err) end,
    go = function(name) assert(io.open(dir .. "/" .. name, "w")):close() end,
    wait = function()
      local r = p:wait()
      os.execute("rm -rf " .. dir)
      return r
    end,
  }
end

-- The probe lines' n values, in the order they are in text.
local function ns(text)
  local got = {}
  for n in text:gmatch("probe n=(%d+)") do got[#got + 1] = tonumber(n) end
  return got
end

describe("core.log_batch", function()
  it("holds info lines until a warn line, which follows them at once, in order", async(function()
    local c = child([[
      core.log_batch(60000)
      core.log("info", "probe", { n = 1 })
      core.log("debug", "probe", { n = 99 }) -- under the level: never written
      core.log("info", "probe", { n = 2 })
      say("logged")
      await("warn")
      core.log("warn", "probe", { n = 3 })
      await("end")
    ]])
    assert.truthy(wait_for(function() return c.out():find("logged") end, 20000), c.err())
    assert.same({}, ns(c.err())) -- held: the window is a minute away
    c.go("warn")
    assert.truthy(wait_for(function() return #ns(c.err()) == 3 end, 20000), c.err())
    assert.same({ 1, 2, 3 }, ns(c.err()))
    c.go("end")
    assert.equal(0, c:wait().exit)
  end))

  it("writes the held lines when the timer is due", async(function()
    local c = child([[
      core.log_batch(30)
      core.log("info", "probe", { n = 1 })
      core.log("info", "probe", { n = 2 })
      await("end")
    ]])
    assert.truthy(wait_for(function() return #ns(c.err()) == 2 end, 20000), c.err())
    assert.same({ 1, 2 }, ns(c.err()))
    c.go("end")
    assert.equal(0, c:wait().exit)
  end))

  it("writes 4 KiB of held lines without waiting for the timer", async(function()
    local c = child([[
      core.log_batch(60000)
      for n = 1, 100 do core.log("info", "probe", { n = n, pad = string.rep("x", 150) }) end
      say("logged")
      await("end")
    ]])
    assert.truthy(wait_for(function() return c.out():find("logged") end, 20000), c.err())
    -- ~170 bytes a line: all but the last 4 KiB's worth (at most 24 lines) are out, whole
    assert.truthy(wait_for(function() return #ns(c.err()) >= 76 end, 20000), c.err())
    local got = ns(c.err())
    assert.truthy(#got < 100, "the last lines were not held")
    for i, n in ipairs(got) do assert.equal(i, n) end
    assert.equal("\n", c.err():sub(-1))
    c.go("end")
    assert.equal(0, c:wait().exit)
    assert.equal(100, #ns(c.err())) -- the rest at the engine's shutdown
  end))

  it("leaves nothing held at the engine's shutdown or at exit()", async(function()
    local ended = child([[
      core.log_batch(60000)
      core.log("info", "probe", { n = 1 })
    ]])
    local r = ended:wait()
    assert.equal(0, r.exit)
    assert.same({ 1 }, ns(ended.err()))
    local exited = child([[
      core.log_batch(60000)
      core.log("info", "probe", { n = 2 })
      os.exit(3, false)
    ]])
    r = exited:wait()
    assert.equal(3, r.exit)
    assert.same({ 2 }, ns(exited.err()))
  end))

  it("writes every line at once again after core.log_batch(0)", async(function()
    local c = child([[
      core.log_batch(60000)
      core.log("info", "probe", { n = 1 })
      core.log_batch(0)
      core.log("info", "probe", { n = 2 })
      say("logged")
      await("end")
    ]])
    assert.truthy(wait_for(function() return c.out():find("logged") end, 20000), c.err())
    assert.truthy(wait_for(function() return #ns(c.err()) == 2 end, 20000), c.err())
    assert.same({ 1, 2 }, ns(c.err()))
    c.go("end")
    assert.equal(0, c:wait().exit)
  end))
end)
