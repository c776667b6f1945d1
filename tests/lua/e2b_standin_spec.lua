-- The E2B stand-in itself (tests/support/e2b_standin.py), driven with raw HTTP: it must behave
-- the way E2B does where the executor's specs rely on it — otherwise they prove nothing. Its
-- envelopes really arrive split at awkward places; SendSignal and envd's deadline really reach
-- the pid only (so the executor's group kill is what kills a child); a dropped stream leaves
-- the process running; keys, tokens and missing sandboxes answer as E2B's do.
local core = require("switchboard.core")
local cjson = require("cjson")
local async = require("support.async")
local E = require("support.e2b")
local procs = require("support.procs")
local connect = require("switchboard.exec.connect")

local h
setup(function() core.run(function() h = E.start() end) end)
teardown(function() core.run(function() h:stop() end) end)

local function api(method, path, body, key)
  local status, _, raw = core.http.request{
    method = method, url = h.url .. path, deadline_ms = 10000,
    headers = { ["x-api-key"] = key or E.KEY, ["content-type"] = "application/json" },
    body = body and cjson.encode(body) or nil,
  }
  return status, raw ~= "" and cjson.decode(raw) or nil
end

local function create()
  local status, doc = api("POST", "/sandboxes", { templateID = "base", timeout = 60 })
  assert.equal(201, status)
  return doc
end

-- Start a process; returns the HTTP status, the chunks as they arrived, the decoded frames.
local function start(sb, args, opts)
  opts = opts or {}
  local chunks = {}
  local headers = {
    ["content-type"] = "application/connect+json", ["x-access-token"] = opts.token or sb.envdAccessToken,
    ["e2b-sandbox-id"] = sb.sandboxID, ["connect-protocol-version"] = "1",
    ["keepalive-ping-interval"] = opts.ping or "50",
  }
  if opts.timeout_ms then headers["connect-timeout-ms"] = tostring(opts.timeout_ms) end
  local status, _, raw = core.http.request{
    method = "POST", url = h.url .. "/process.Process/Start", headers = headers,
    body = connect.encode(0, cjson.encode{ process = { cmd = "/bin/bash", args = args, cwd = "/home/user" }, stdin = false }),
    deadline_ms = opts.deadline_ms or 20000, signal = opts.signal,
    on_chunk = function(c) chunks[#chunks + 1] = c end,
  }
  local frames = {}
  if status == 200 then
    local d = connect.decoder()
    for _, c in ipairs(chunks) do
      for _, f in ipairs(assert(d:feed(c))) do frames[#frames + 1] = f end
    end
  end
  return status, chunks, frames, raw
end

-- The decoded messages, the end-of-stream frame left out.
local function events(frames)
  local out = {}
  for _, f in ipairs(frames) do
    if not f.end_stream then out[#out + 1] = cjson.decode(f.data) end
  end
  return out
end

describe("the E2B stand-in", function()
  it("answers a wrong API key with 401 and a missing sandbox with 404, as the control plane does", async(function()
    local status, doc = api("POST", "/sandboxes", { templateID = "base" }, "e2b_wrong")
    assert.equal(401, status)
    assert.matches("Invalid API key", doc.message)
    status = api("POST", "/sandboxes/nope/connect", { timeout = 10 })
    assert.equal(404, status)
    local sb = create()
    assert.truthy(sb.envdAccessToken)
    assert.equal(204, (api("DELETE", "/sandboxes/" .. sb.sandboxID)))
    assert.equal(404, (api("DELETE", "/sandboxes/" .. sb.sandboxID)))
  end))

  it("streams start, data, end and the end-of-stream frame, cut inside headers and across frames", async(function()
    local sb = create()
    local status, chunks, frames = start(sb, { "-c", "echo hi; exit 3" })
    assert.equal(200, status)
    local ev = events(frames)
    assert.truthy(ev[1].event.start.pid)
    assert.equal("aGkK", ev[2].event.data.stdout)
    assert.equal(3, ev[3].event["end"].exitCode)
    assert.is_true(frames[#frames].end_stream)
    -- some chunk boundary falls inside a 5-byte header: the pieces really are awkward
    local pos, inside = 0, false
    local starts = {}
    local off = 0
    for _, f in ipairs(frames) do starts[#starts + 1] = off; off = off + 5 + #f.data end
    for _, c in ipairs(chunks) do
      pos = pos + #c
      for _, s in ipairs(starts) do
        if pos > s and pos < s + 5 then inside = true end
      end
    end
    assert.is_true(inside, "no chunk ended inside an envelope header")
    -- a zero exit code is omitted, as protobuf JSON does
    local _, _, f2 = start(sb, { "-c", "true" })
    local e = events(f2)
    assert.is_nil(e[#e].event["end"].exitCode)
  end))

  it("refuses a wrong access token (401) and answers a vanished sandbox's envd with 502 not found", async(function()
    local sb = create()
    local status = start(sb, { "-c", "true" }, { token = "wrong" })
    assert.equal(401, status)
    h:vanish(sb.sandboxID)
    local s2, _, _, raw = start(sb, { "-c", "true" })
    assert.equal(502, s2)
    assert.matches("The sandbox was not found", raw)
  end))

  it("sends keepalives at the asked interval while the command is quiet", async(function()
    local sb = create()
    local _, _, frames = start(sb, { "-c", "sleep 2.5" }, { ping = "1" })
    local n = 0
    for _, e in ipairs(events(frames)) do if e.event.keepalive then n = n + 1 end end
    assert.is_true(n >= 2, tostring(n))
  end))

  it("SendSignal and its own deadline reach the pid only: a child in the group survives", async(function()
    local sb = create()
    -- the leader is its own group (bash -c); its background child stays in that group
    local stop = core.signal()
    core.go(function()
      start(sb, { "-c", "sleep 30 & echo $! > bg.pid; wait" }, { signal = stop, deadline_ms = 30000 })
    end)
    local bgfile = h:sandbox(sb.sandboxID).root .. "/home/user/bg.pid"
    local bg = E.wait_for(function()
      local f = io.open(bgfile); if not f then return nil end
      local s = f:read("a"); f:close(); return tonumber(s:match("%d+"))
    end, 60000) -- a bound for a loaded machine: the file ends the wait
    assert.truthy(bg)
    -- bash can write bg.pid before the stand-in's request thread has recorded the pid Popen
    -- returned (a loaded machine): the stand-in's own list ends this wait
    local leader = E.wait_for(function()
      local pids = h:sandbox(sb.sandboxID).pids
      return pids[#pids]
    end, 30000)
    assert.truthy(leader, "the stand-in never listed the command's pid")
    local status = core.http.request{
      method = "POST", url = h.url .. "/process.Process/SendSignal", deadline_ms = 5000,
      headers = { ["content-type"] = "application/json", ["x-access-token"] = sb.envdAccessToken,
                  ["e2b-sandbox-id"] = sb.sandboxID },
      body = cjson.encode{ process = { pid = leader }, signal = "SIGNAL_SIGKILL" },
    }
    assert.equal(200, status)
    assert.is_true(E.wait_for(function() return not procs.alive(leader) end, 30000))
    -- not a bound: a group kill would be the same kill(2) as the leader's; this only lets it land
    core.sleep(300)
    assert.is_true(procs.alive(bg), "the child died with its leader: the stand-in would hide a missing group kill")
    -- the deadline: the leader is killed, the child again survives (the limit only has to
    -- outlast bash writing bg2.pid, its first act — seconds to spare on a loaded machine — and
    -- stay under the child's 30 s)
    local _, _, frames = start(sb, { "-c", "sleep 30 & echo $! > bg2.pid; wait" }, { timeout_ms = 10000 })
    local trailer = cjson.decode(frames[#frames].data)
    assert.equal("deadline_exceeded", trailer.error.code)
    local f = assert(io.open(h:sandbox(sb.sandboxID).root .. "/home/user/bg2.pid"))
    local bg2 = tonumber(f:read("a"):match("%d+")); f:close()
    core.sleep(300)
    assert.is_true(procs.alive(bg2))
    stop:abort("done")
    api("DELETE", "/sandboxes/" .. sb.sandboxID) -- the VM goes, with everything in it
    assert.is_true(E.wait_for(function() return not procs.alive(bg) and not procs.alive(bg2) end, 5000))
  end))

  it("leaves the process running when its stream's client goes away", async(function()
    local sb = create()
    local stop = core.signal()
    local home = h:sandbox(sb.sandboxID).root .. "/home/user/"
    -- the client goes once the command runs, and the command ends only after that
    core.go(function()
      E.wait_for(function() local f = io.open(home .. "started"); if f then f:close() end; return f end, 30000)
      stop:abort("gone")
      io.open(home .. "go", "w"):close()
    end)
    local status = start(sb, { "-c", "echo up > started; until [ -e go ]; do sleep 0.05; done; echo done > after.txt" },
      { signal = stop })
    assert.is_nil(status)
    local file = home .. "after.txt"
    assert.truthy(E.wait_for(function() local f = io.open(file); if f then f:close() end; return f end, 10000))
  end))
end)

describe("the E2B stand-in's pause and resume", function()
  it("answers them as E2B's API does, and a paused sandbox's files and processes wait for the resume", async(function()
    local status, sb = api("POST", "/sandboxes", { templateID = "base", timeout = 60, autoPause = true })
    assert.equal(201, status)
    local id = sb.sandboxID
    assert.is_true(h:sandbox(id).auto_pause)
    local home = h:sandbox(id).root .. "/home/user/"
    start(sb, { "-c", "echo before > kept.txt; sleep 60 >/dev/null 2>&1 & echo $! > bg.pid" })
    local fh = assert(io.open(home .. "bg.pid"))
    local bg = tonumber(fh:read("a"):match("%d+")); fh:close()
    assert.equal(204, (api("POST", "/sandboxes/" .. id .. "/pause")))
    assert.equal(409, (api("POST", "/sandboxes/" .. id .. "/pause")))
    -- paused: not running, so no timeout to stretch and no envd behind the proxy
    assert.equal(404, (api("POST", "/sandboxes/" .. id .. "/timeout", { timeout = 30 })))
    assert.equal(502, (start(sb, { "-c", "true" })))
    -- SIGSTOP is delivered when the process is next scheduled: on a loaded machine it may still
    -- read "R" (runnable, the signal pending) for a moment, so wait for the stop itself
    local function state() return io.open("/proc/" .. bg .. "/stat"):read("a"):match("%) (%a)") end
    assert.truthy(E.wait_for(function() return state() == "T" end, 10000),
      "a paused sandbox's process is not frozen (state " .. tostring(state()) .. ")")
    -- connect resumes it: 201, the same token; a second connect finds it running: 200
    local st2, doc = api("POST", "/sandboxes/" .. id .. "/connect", { timeout = 30 })
    assert.equal(201, st2)
    assert.equal(sb.envdAccessToken, doc.envdAccessToken)
    assert.equal(200, (api("POST", "/sandboxes/" .. id .. "/connect", { timeout = 30 })))
    assert.equal(409, (api("POST", "/sandboxes/" .. id .. "/resume", { timeout = 30 })))
    assert.is_true(procs.alive(bg))
    local _, _, frames = start(sb, { "-c", "cat kept.txt" })
    local out = {}
    for _, ev in ipairs(events(frames)) do
      local d = ev.event and ev.event.data
      if d and d.stdout then out[#out + 1] = core.crypto.base64_decode(d.stdout) end
    end
    assert.equal("before\n", table.concat(out))
    -- paused again and dropped (E2B's retention ran out): gone, 404 to connect and resume
    assert.equal(204, (api("POST", "/sandboxes/" .. id .. "/pause")))
    h:expire(id)
    assert.equal(404, (api("POST", "/sandboxes/" .. id .. "/connect", { timeout = 30 })))
    assert.equal(404, (api("POST", "/sandboxes/" .. id .. "/resume", { timeout = 30 })))
    assert.is_true(E.wait_for(function() return not procs.alive(bg) end, 10000))
  end))
end)
