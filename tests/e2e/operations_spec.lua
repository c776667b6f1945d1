-- The operator's daily tools as an operator runs them (docs/operations.md): an overlay policy
-- directory, `switchboard reload --pid-file` and what the reload log says, the CLI's
-- conventions, and logs that are structured from the first line to the last.
local core = require("switchboard.core")
local cjson = require("cjson")
local async = require("support.async")
local S = require("support.sandbox")
local bin = require("support.bin")
local tmp = require("support.tmp")
local P = require("support.policies")

local function overlay(files)
  local dir = tmp.dir("overlay")
  for name, src in pairs(files) do P.write(dir .. "/" .. name .. ".lua", src) end
  return dir
end

local function lines_of(text)
  local out = {}
  for l in text:gmatch("[^\n]+") do out[#out + 1] = l end
  return out
end

describe("operations: overlays and reload", function()
  after_each(function() S.cleanup_servers(); tmp.remove_all() end)

  it("sandboxd runs on a one-line overlay; `switchboard reload --pid-file` says what changed", async(function()
    local dir = overlay({ timeouts = "bash.max_ms = 20 * minute\n" })
    local pid_file = tmp.dir("run") .. "/sandboxd.pid"
    local h = S.start_sandboxd({ policies = dir, global = { "--pid-file", pid_file } })
    assert.equal(tostring(h.pid), (P.read(pid_file):gsub("%s+$", "")))
    P.write(dir .. "/timeouts.lua", "bash.max_ms = 30 * minute\nserver.max_connections = 100\n")
    local r = bin.run({ "reload", "--pid-file", pid_file })
    assert.equal(0, r.exit, r.stderr)
    assert.truthy(r.stdout:find("sent SIGHUP to switchboard process " .. h.pid, 1, true))
    local log = S.wait_for(function()
      local l = h.log()
      return l:find("policy.restart_required", 1, true) and l
    end, 20000)
    assert.truthy(log, "no policy.restart_required line:\n" .. h.log())
    assert.truthy(log:find('change="bash.max_ms 1200000 → 1800000"', 1, true), log)
    assert.matches("policy%.reloaded [^\n]*old_version=%x+", log)
    assert.matches("warn policy%.restart_required [^\n]*key=server%.max_connections", log)
    h:stop("TERM")
    h:wait()
    assert.is_nil(io.open(pid_file, "r"), "the pid file outlived the process")
    -- a stale file: refused, nothing signalled
    P.write(pid_file, tostring(h.pid) .. "\n")
    r = bin.run({ "reload", "--pid-file", pid_file })
    assert.equal(1, r.exit)
    assert.truthy(r.stderr:find("no such process", 1, true) or r.stderr:find("not switchboard", 1, true), r.stderr)
    r = bin.run({ "reload" })
    assert.equal(2, r.exit)
    assert.truthy(r.stderr:find("--pid-file FILE", 1, true))
  end))

  it("a sandboxd started without --max-instances wakes the shipped 25 instances, and no 26th", async(function()
    -- the shipped fleet, on small workspaces: each image is reserved on the host's disk whole
    local h = S.start_sandboxd({ policies = overlay({ isolation = "workspace_max_bytes = 64 * MiB\n" }) })
    for i = 1, 25 do
      local status, _, body = S.call(h.url, "/exec", { thread = "T" .. i, body = { command = "true" } })
      assert.equal(200, status)
      assert.equal(0, cjson.decode(body).exitCode, body)
    end
    local status, _, body = S.call(h.url, "/exec", { thread = "T26", body = { command = "true" } })
    assert.equal(200, status)
    local doc = cjson.decode(body)
    assert.equal("fleet-busy", doc.reason, body)
    assert.truthy(h.log():find("max_instances=25", 1, true))
  end))

  it("a broken overlay names the operator's own file and line at start", async(function()
    local dir = overlay({ timeouts = "-- mine\nbash.max_ms = 2 * minute\n" })
    local r = bin.run({ "--policies", dir, "exec", "--", "true" })
    assert.equal(78, r.exit)
    assert.truthy(r.stderr:find(dir .. "/timeouts.lua:2: bash.default_ms must not exceed bash.max_ms", 1, true), r.stderr)
    r = bin.run({ "policy", "check", dir .. "/nope" })
    assert.equal(2, r.exit)
    assert.truthy(r.stderr:find("does not exist", 1, true))
  end))
end)

describe("operations: command-line conventions", function()
  after_each(function() tmp.remove_all() end)

  it("--version and -h", async(function()
    local r = bin.run({ "--version" })
    assert.equal(0, r.exit)
    assert.matches("^switchboard %x+", r.stdout)
    r = bin.run({ "-h" })
    assert.equal(0, r.exit)
    assert.truthy(r.stdout:find("Usage: switchboard", 1, true))
  end))

  it("global options after the command are taken; unknown short options are named", async(function()
    local root = tmp.dir("ws")
    local r = bin.run({ "exec", "--workspace-root", root, "--log-level", "info", "--", "echo", "hi" })
    assert.equal(0, r.exit, r.stderr)
    assert.equal("hi\n", r.stdout)
    assert.truthy(r.stderr:find("policy.loaded", 1, true), r.stderr) -- info reached the log
    r = bin.run({ "exec", "-x", "--", "true" })
    assert.equal(2, r.exit)
    assert.truthy(r.stderr:find("unknown option -x", 1, true), r.stderr)
    r = bin.run({ "-q", "exec", "--", "true" })
    assert.equal(2, r.exit)
    assert.truthy(r.stderr:find("unknown option -q", 1, true), r.stderr)
  end))

  it("exec and the console say the same about a missing --sandbox-url and a bad --repo", async(function()
    local e = bin.run({ "exec", "--backend", "sandbox", "--", "true" }, { env = { SANDBOX_TOKEN = "t0ken-xyz" } })
    local c = bin.run({ "console", "--backend", "sandbox" }, { stdin = "", env = { SANDBOX_TOKEN = "t0ken-xyz" } })
    assert.equal(78, e.exit)
    assert.equal(78, c.exit)
    local want = "--backend sandbox needs --sandbox-url URL"
    assert.truthy(e.stderr:find(want, 1, true), e.stderr)
    assert.equal(e.stderr:gsub("^switchboard exec: ", ""), (c.stderr:gsub("^switchboard console: ", "")))
    local r = bin.run({ "exec", "--repo", "not a repo", "--", "true" })
    assert.equal(2, r.exit)
    assert.truthy(r.stderr:find("name it as OWNER/REPO", 1, true), r.stderr)
  end))

  it("the timeout note tells a command-line user about --timeout-ms", async(function()
    local root = tmp.dir("ws")
    local r = bin.run({ "exec", "--workspace-root", root, "--timeout-ms", "1000", "--", "sleep 10" })
    assert.equal(124, r.exit)
    assert.truthy(r.stderr:find("--timeout-ms N", 1, true), r.stderr)
  end))
end)

describe("operations: logs", function()
  after_each(function() tmp.remove_all() end)

  it("on the journal (JOURNAL_STREAM names stderr) every line carries its priority", async(function()
    local sh = 'JOURNAL_STREAM=$(stat -L -c %d:%i /proc/self/fd/2) exec "$0" --log-level debug exec -- true'
    local r = assert(core.spawn{ argv = { "sh", "-c", sh, bin.path }, env = bin.env() }):wait()
    assert.equal(0, r.exit, r.stderr)
    assert.matches("^<6>info policy%.loaded ", r.stderr)
    -- inherited by a process whose stderr is elsewhere: plain lines
    r = bin.run({ "--log-level", "info", "exec", "--", "true" }, { env = { JOURNAL_STREAM = "1:2" } })
    assert.matches("^%d%d%d%d%-%d%d%-%d%dT[^\n]* info policy%.loaded ", r.stderr)
  end))

  it("an invalid --log-level is refused", async(function()
    local r = bin.run({ "--log-level", "loud", "version" })
    assert.equal(2, r.exit)
    assert.truthy(r.stderr:find("--log-level must be debug, info, warn or error", 1, true), r.stderr)
  end))

  it("--log-format json: fatal start-up errors and notes are JSON documents too", async(function()
    local root = tmp.dir("ws")
    local r = bin.run({ "--log-format", "json", "exec", "--workspace-root", root, "--timeout-ms", "1000",
      "--", "sleep 10" })
    assert.equal(124, r.exit)
    local n = 0
    for _, l in ipairs(lines_of(r.stderr)) do
      local doc = assert(cjson.decode(l), l)
      n = n + 1
      assert.is_string(doc.event)
    end
    assert.truthy(n >= 1, "no log line at all")
    local dir = overlay({ timeouts = "bash.max_ms = 2 * minute\n" })
    for _, argv in ipairs({
      { "--log-format", "json", "--policies", dir, "exec", "--", "true" },
      { "--log-format", "json", "exec", "--repo", "x", "--", "true" },
      { "--log-format", "json", "--log-level", "loud", "exec", "--", "true" },
      { "--log-format", "json", "nosuchcommand" },
    }) do
      r = bin.run(argv)
      assert.truthy(r.exit ~= 0)
      local ls = lines_of(r.stderr)
      assert.truthy(#ls >= 1, table.concat(argv, " "))
      for _, l in ipairs(ls) do
        local ok, doc = pcall(cjson.decode, l)
        assert.truthy(ok and type(doc) == "table", "not JSON: " .. l)
      end
    end
  end))
end)
