-- Black-box: sandboxd's descriptor budget (issue 28) and the host's file table (issue 22 item 8).
-- The real binary on loopback under a real open-files limit (`ulimit -n` in a wrapper shell),
-- real walled instances.
local core = require("switchboard.core")
local cjson = require("cjson")
local S = require("support.sandbox")
local policies = require("support.policies")

local LIMIT = 300

-- A wrapper that starts the real binary under RLIMIT_NOFILE = LIMIT (soft and hard).
local function limited_bin(dir)
  local path = dir .. "/sandboxd-limited"
  local f = assert(io.open(path, "w"))
  f:write(("#!/bin/sh\nulimit -n %d || exit 99\nexec %s \"$@\"\n"):format(LIMIT, S.BIN))
  f:close()
  assert(os.execute("chmod +x '" .. path .. "'"))
  return path
end

local function log_of(h) return h.log() end

describe("sandboxd descriptor budget", function()
  after_each(function() S.cleanup_servers(); policies.cleanup() end)

  it("refuses in words past the instances its open-files limit holds, and loses no command", function()
    core.run(function()
      local tmp = S.tmpdir()
      local bin = S.BIN
      S.BIN = limited_bin(tmp)
      -- 64 connections at most: the instances' share of the 300 descriptors is what is left
      local dir = policies.dir{
        timeouts = function(src) return src .. "\n" .. S.FAST .. "server.max_connections = 64\nsandbox.heartbeat_ms = 1000\n" end,
        -- up to 30 awake at once: small workspaces, each image reserved on the host's disk whole
        isolation = function(src) return src .. "\nworkspace_max_bytes = 64 * MiB\n" end,
      }
      local ok, h = pcall(S.start_sandboxd, { policies = dir, args = { "--max-instances", "25" } })
      S.BIN = bin
      assert(ok, h)
      assert.truthy(log_of(h):find("sandboxd.descriptors_short", 1, true), log_of(h))
      local fit = tonumber(log_of(h):match("instances_that_fit=(%d+)"))
      assert.is_true(fit ~= nil and fit >= 4 and fit < 30, log_of(h))
      -- 30 threads at once, each a command that runs until told to stop
      local n, done, me = 30, 0, core.current()
      local ran, busy, other = 0, 0, {}
      for i = 1, n do
        core.go(function()
          local status, _, body = S.call(h.url, "/exec", { thread = "fd-" .. i,
            body = { command = "sleep 3; echo ran" }, deadline_ms = 120000 })
          local doc = status == 200 and cjson.decode(body) or {}
          if doc.exitCode == 0 and doc.stdout == "ran\n" then
            ran = ran + 1
          elseif doc.reason == "fleet-busy" or tostring(doc.error):find("fleet-busy", 1, true) then
            busy = busy + 1
            assert.truthy(doc.error:find(("open-files limit (%d)"):format(LIMIT), 1, true), doc.error)
          else
            other[#other + 1] = tostring(status) .. " " .. tostring(body)
          end
          done = done + 1
          if done == n then core.wake(me) end
        end)
      end
      core.suspend()
      assert.same({}, other, "the server's log:\n" .. log_of(h)) -- bwrap's own words are there (sandboxd.instance_failed)
      assert.equal(fit, ran)        -- every instance that fits ran its command …
      assert.equal(n - fit, busy)   -- … and every other request was refused in words
      assert.is_nil(log_of(h):find("Too many open files", 1, true), log_of(h))
      assert.is_nil(log_of(h):find("EMFILE", 1, true), log_of(h))
      h:stop("TERM")
      h:wait()
      S.rm(tmp)
    end)
  end)

  it("refuses at start a --max-instances whose fleet could exhaust the host's file table", function()
    core.run(function()
      local h = S.start_sandboxd{ policies = S.policy_dir(), args = { "--max-instances", "100000" }, may_fail = true }
      local r = h:wait()
      assert.is_true(r.exit ~= 0)
      local log = h.log()
      assert.truthy(log:find("--max-instances 100000", 1, true), log)
      assert.truthy(log:find("fs.file-max", 1, true), log)
      assert.truthy(log:find("lower open_files or pids_max", 1, true), log)
    end)
  end)
end)

describe("policy load: the host's file table", function()
  after_each(function() policies.cleanup() end)

  it("refuses a policy whose full fleet could hold more than fleet_files_percent of fs.file-max", function()
    local dir = policies.dir{ isolation = function(src)
      return src .. "\nopen_files = 1048576\npids_max = 4096\n"
    end }
    local snap, errs = policies.load(dir)
    assert.is_nil(snap)
    assert.is_true(policies.has(errs, "isolation", "open_files", "fs.file-max", "fleet_files_percent",
      "lower open_files or pids_max"), table.concat(errs or {}, "\n"))
  end)

  it("the shipped policy fits this host's table", function()
    assert.truthy(policies.shipped())
  end)
end)
