-- Black-box: the sandbox executor reads sandboxd's build from /healthz once per instance (one
-- executor per thread) and logs sandbox.version-skew at warn when it differs from its own
-- build — and does nothing else (issue 14 item 7, docs/contract.md#rollout-skew). The console drives it, so
-- several asks share one thread's executor.
local core = require("switchboard.core")
local cjson = require("cjson")
local bin = require("support.bin")
local sb = require("support.sandbox")

local BIN = bin.path
local OWN = nil

local function own_commit()
  if not OWN then
    local r = bin.run({ "version", "--json" })
    OWN = cjson.decode(r.stdout).commit
  end
  return OWN
end

-- Starts tests/support/skewed_sandboxd.py answering /healthz with `commit`.
local function start_skewed(commit, extra)
  local dir = sb.tmpdir()
  local argv = { "/usr/bin/python3", "tests/support/skewed_sandboxd.py", "--dir", dir, "--commit", commit,
    "--watch", tostring(require("support.procs").self_pid()) } -- it ends with this process
  for _, a in ipairs(extra or {}) do argv[#argv + 1] = a end
  local proc = assert(core.spawn{ argv = argv, env = sb.base_env() })
  local port = sb.wait_for(function() return sb.read(dir .. "/port") end, 180000) -- python3 on a loaded machine: the file ends the wait
  assert(port, "the skewed sandboxd did not start")
  local h = { url = "http://127.0.0.1:" .. port }
  function h.healthz_count()
    local _, _, body = core.http.request{ method = "GET", url = h.url .. "/_count", deadline_ms = 5000 }
    return cjson.decode(body).healthz
  end
  function h.stop() os.execute("kill " .. proc.pid); proc:wait(); sb.rm(dir) end
  return h
end

-- Runs a console session of `lines` against url; returns its stderr (the log) and stdout.
local function console(url, lines)
  local state = sb.tmpdir()
  local r = bin.run({ "--policies", sb.policy_dir(), "console", "--backend", "sandbox", "--sandbox-url", url },
    { stdin = table.concat(lines, "\n") .. "\n", env = { SANDBOX_TOKEN = sb.TOKEN, SWITCHBOARD_STATE_DIR = state,
      HOME = state, GH_TOKEN = "specs-own-token" }, deadline_ms = 60000 })
  sb.rm(state)
  return r.stderr, r.stdout, r
end

local function count(text, pattern)
  local _, n = text:gsub(pattern, "")
  return n
end

after_each(function() sb.cleanup_servers(); sb.cleanup() end)

describe("sandbox executor: version skew (log only)", function()
  it("names both builds once per thread when sandboxd runs another build, and the commands still run", function()
    core.run(function()
      local srv = start_skewed("0ld0ld0ld")
      local log, out = console(srv.url, { "run `echo one`", "run `echo two`", "/thread other", "run `echo three`" })
      assert.equal(3, count(out, "ran"), out .. log)
      assert.equal(2, srv.healthz_count()) -- two threads, two executors, one read each
      assert.equal(2, count(log, "sandbox%.version%-skew"), log)
      local line = log:match("[^\n]*sandbox%.version%-skew[^\n]*")
      assert.truthy(line:find("warn", 1, true), line)
      assert.truthy(line:find("container=0ld0ld0ld", 1, true), line)
      assert.truthy(line:find("bot=" .. own_commit(), 1, true), line)
      srv.stop()
    end)
  end)

  it("says nothing when sandboxd runs the same build", function()
    core.run(function()
      local srv = start_skewed(own_commit())
      local log, out = console(srv.url, { "run `echo one`", "run `echo two`" })
      assert.equal(2, count(out, "ran"), out .. log)
      assert.equal(1, srv.healthz_count())
      assert.equal(0, count(log, "version%-skew"), log)
      srv.stop()
    end)
  end)

  it("logs container=unknown when /healthz does not answer with a build", function()
    core.run(function()
      local srv = start_skewed("x", { "--healthz-status", "500" })
      local log, out = console(srv.url, { "run `echo one`" })
      assert.equal(1, count(out, "ran"), out .. log)
      assert.truthy(log:find("sandbox%.version%-skew[^\n]*container=unknown"), log)
      srv.stop()
    end)
  end)

  it("a real sandboxd of this build is not skewed", function()
    core.run(function()
      local server = sb.start_sandboxd{ policies = sb.policy_dir() }
      local log, out = console(server.url, { "run `echo same-build`" })
      assert.truthy(out:find("same-build", 1, true), out .. log)
      assert.equal(0, count(log, "version%-skew"), log)
      server:stop("TERM")
      server:wait()
    end)
  end)
end)
