-- Black-box: a stalled server never turns a command that ended in time into a timeout (issue 22
-- item 1). The server is stopped with SIGSTOP while its command runs and continued only once the
-- command has ended and its deadline has long passed: on continuing, the deadline's timer is due
-- before the loop has polled for the command's end. Unwalled the engine reaps the pidfd first;
-- walled the end is the spawner's reply on the socket, which must be read before a deadline is
-- declared. Both kinds must answer exit 0 with the command's output.
local core = require("switchboard.core")
local cjson = require("cjson")
local S = require("support.sandbox")
local policies = require("support.policies")
local workspace = require("switchboard.shell.workspace")

local TIMEOUT_MS = 5000

local function policy_dir()
  return policies.dir{ timeouts = function(src) return src .. "\n" .. S.FAST .. "\n" end }
end

local describe_walls = require("support.walls").probe(policy_dir(),
  { describe = describe, it = it, pending = pending })

after_each(S.cleanup_servers)
teardown(S.cleanup)

local function exists(path)
  local f = io.open(path, "rb")
  if f then f:close() end
  return f ~= nil
end

-- Sends the command, stops the server once the command has started, continues it once the
-- command has ended (its own marker) and its deadline is well past, and returns the answer.
local function stalled_exec(h, thread)
  -- (walled: the workspace is a file system of its instance's, S.files finds it from the host)
  local function marker(name)
    return function()
      local dir = S.files(h, thread) or workspace.path(h.root, thread)
      return exists(dir .. "/" .. name)
    end
  end
  local started, ended = marker("started"), marker("ended")
  local answer
  core.go(function()
    local status, _, raw = S.call(h.url, "/exec", { thread = thread, deadline_ms = 120000, body = {
      command = "touch started; sleep 2; echo finished-in-time; touch ended", timeoutMs = TIMEOUT_MS } })
    answer = { status = status, raw = raw }
  end)
  assert(S.wait_for(started, 60000), "the command never started (its files at "
    .. tostring(S.files(h, thread)) .. "):\n" .. h.log())
  local t_started = core.now_ms()
  h:stop("STOP")
  -- The command ends on its own while the server is stopped; then its deadline passes (from
  -- its start, which came before the marker), with a margin.
  assert(S.wait_for(ended, 60000), "the command never ended")
  S.wait_for(function() return core.now_ms() - t_started > TIMEOUT_MS + 2000 end, 60000)
  h:stop("CONT")
  assert(S.wait_for(function() return answer end, 60000), "no answer after the server continued")
  assert.equal(200, answer.status, answer.raw)
  return cjson.decode(answer.raw)
end

local function check(r)
  assert.equal(0, r.exitCode, r.stderr)
  assert.equal("finished-in-time\n", r.stdout)
  assert.is_nil(r.stderr:find("timed out", 1, true), r.stderr)
end

describe("a server stalled past the deadline of a command that ended in time", function()
  it("unwalled (--no-walls: the pidfd path, the reference for the walled case): exit 0", function()
    core.run(function()
      local h = S.start_sandboxd{ policies = policy_dir(), args = { "--no-walls" } }
      check(stalled_exec(h, "stall-unwalled"))
      h:stop(); h:wait()
    end)
  end)
end)

describe_walls("a walled server stalled past the deadline of a command that ended in time", function()
  it("answers exit 0 with the output, not 124", function()
    core.run(function()
      local h = S.start_sandboxd{ policies = policy_dir() }
      check(stalled_exec(h, "stall-walled"))
      -- and a command that really runs past its deadline still times out
      local status, _, raw = S.call(h.url, "/exec", { thread = "stall-walled", deadline_ms = 120000,
        body = { command = "sleep 30", timeoutMs = 500 } })
      assert.equal(200, status, raw)
      assert.equal(124, cjson.decode(raw).exitCode, raw)
      h:stop(); h:wait()
    end)
  end)
end)
