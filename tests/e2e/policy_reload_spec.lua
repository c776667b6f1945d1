-- Black-box: policy reload (SIGHUP) on a running `switchboard sandboxd`, and `switchboard policy
-- check` as an operator runs it. The server gets a scratch copy of the shipped policies with the
-- numbers scaled down (support.sandbox FAST, plus the bash ceilings below), the spec edits the
-- files in place, sends HUP and reads the outcome in the server's log and in its answers.
local core = require("switchboard.core")
local cjson = require("cjson")
local async = require("support.async")
local S = require("support.sandbox")
local P = require("support.policies")

local SHIPPED_TIMEOUTS = P.read("policies/timeouts.lua")
local SHIPPED_ERRORS = P.read("policies/errors.lua")

-- The bash ceiling at max_s seconds, with the defaults under every ceiling used here.
local function ceiling(max_s)
  return ("bash.max_ms = %d * second\nbash.default_ms = 1 * second\n"
    .. "sandbox.default_budget_ms = 1 * second\n"):format(max_s)
end

-- timeouts.lua as shipped, scaled down, then `lines` (a later line refines an earlier one).
local function timeouts_src(lines)
  return SHIPPED_TIMEOUTS .. "\n" .. S.FAST .. "\n" .. lines
end

local function line_count(text)
  return select(2, text:gsub("\n", ""))
end

-- errors.lua with one example that its rule fails: fleet_busy "must match" an idle fleet.
local FLEET_BUSY_LINE = line_count(SHIPPED_ERRORS:sub(1, (SHIPPED_ERRORS:find("fleet_busy = rule {", 1, true)))) + 1
local function broken_errors()
  local anchor = '    "CONTAINER_UNAVAILABLE: no container instance available",\n'
  local s, e = SHIPPED_ERRORS:find(anchor, 1, true)
  assert(s, "the anchor line moved in policies/errors.lua")
  return SHIPPED_ERRORS:sub(1, e) .. '    "the fleet is idle and happy",\n' .. SHIPPED_ERRORS:sub(e + 1)
end

-- Replaces a policy file the way an editor that saves atomically does.
local function put(dir, name, src)
  local tmp = dir .. "/." .. name .. ".tmp"
  P.write(tmp, src)
  assert(os.rename(tmp, dir .. "/" .. name))
end

-- The version the server logs: a scratch directory is an overlay over the shipped set.
local function version_of(dir)
  return assert(P.load(dir, { base = "policies" })).version
end

-- Signals the process alone, as `kill -HUP "$(pidof switchboard)"` does (h:stop signals its
-- whole process group; see docs/policies.md on why an operator does not).
local function signal_process(pid, name)
  local r = assert(core.spawn{ argv = { "kill", "-" .. name, tostring(pid) }, env = S.base_env() }):wait()
  assert(r.exit == 0, "kill: " .. r.stderr)
end

-- Follows a server's log as it is written: every sandboxd.reload line as {ok, version}.
-- watch.hup(h) sends HUP and waits (on the loop) for the reload line it causes.
local function reload_watch()
  local w = { reloads = {}, partial = "" }
  function w.on_output(stream, chunk)
    if stream ~= "stderr" then return end
    local text = w.partial .. chunk
    local rest = 1
    for line, nxt in text:gmatch("([^\n]*)\n()") do
      rest = nxt
      if line:find(" sandboxd.reload ", 1, true) then
        w.reloads[#w.reloads + 1] = { ok = line:match(" ok=(%a+)") == "true", version = line:match(" version=(%x+)") }
        if w.want and #w.reloads >= w.want then w.seen:abort("seen") end
      end
    end
    w.partial = text:sub(rest)
  end
  function w.hup(h, timeout_ms)
    local n = #w.reloads + 1
    w.want, w.seen = n, core.signal()
    signal_process(h.pid, "HUP")
    core.sleep(timeout_ms or 60000, w.seen) -- a bound for a loaded machine; the line ends the wait
    w.want = nil
    return assert(w.reloads[n], "no sandboxd.reload line within the wait after HUP")
  end
  return w
end

-- /exec on a real server; the answer document.
local function exec(h, thread, command, timeout_ms)
  local status, _, body = S.call(h.url, "/exec", { thread = thread,
    body = { command = command, timeoutMs = timeout_ms } })
  assert.equal(200, status, tostring(body))
  return cjson.decode(body)
end

-- The limit a deadline kill names, and the ceiling (bash.max_ms) it tells the caller about.
local function limits_named(doc)
  local stderr = doc.stderr or ""
  return { tonumber(stderr:match("the command's limit, (%d+) ms")), tonumber(stderr:match("up to (%d+)%)")) }
end

-- A command that outlives every budget here: which budget and which ceiling did it get?
local function probe_ceiling(h, thread, timeout_ms)
  local doc = exec(h, thread, "sleep 10", timeout_ms)
  assert.equal(124, doc.exitCode, cjson.encode(doc))
  return limits_named(doc)
end

local function awake(h)
  local status, _, body = S.call(h.url, "/healthz", { thread = false })
  assert.equal(200, status)
  return cjson.decode(body).instances.awake
end

local function listening_version(h)
  return h.log():match("sandboxd%.listening[^\n]* version=(%x+)")
end

local function run_bin(args, env)
  local argv = { S.BIN }
  for _, a in ipairs(args) do argv[#argv + 1] = a end
  return assert(core.spawn{ argv = argv, env = S.base_env(env) }):wait()
end

after_each(function()
  S.cleanup_servers()
  P.cleanup()
end)

describe("policy reload on a running sandboxd (HUP)", function()
  it("lower bash.max_ms and HUP: the next command obeys the new ceiling; commands started before keep their budget", async(function()
    local dir = P.dir{ timeouts = timeouts_src(ceiling(40)) }
    local w = reload_watch()
    local h = S.start_sandboxd{ policies = dir, on_output = w.on_output }
    assert.equal(version_of(dir), listening_version(h))

    -- two commands under the 40 s ceiling, both running before the policy changes: one that
    -- finishes when the spec tells it to (a file in its workspace, written after the reload),
    -- and one that runs into its budget. Nothing here races the clock but the second's budget,
    -- which only has to outlast a `policy check` and a reload (well under a second on an idle
    -- machine, seconds on a loaded one under the sanitizer): the whole 40 s ceiling, so that
    -- what it rules out — the new 1 s ceiling applied to a command started before — stays 40
    -- times apart from it.
    local BUDGET = 40000
    local before = {}
    core.go(function() before.finishes = exec(h, "before-1",
      "while [ ! -e go ]; do sleep 0.05; done; echo survived", BUDGET) end)
    core.go(function() before.times_out = exec(h, "before-2", "sleep 100", BUDGET) end)
    assert.truthy(S.wait_for(function() return awake(h) == 2 end, 30000), "the two commands did not start")

    put(dir, "timeouts.lua", timeouts_src(ceiling(1)))
    -- the operator checks first; the check names the version the reload then logs
    local want = version_of(dir)
    local check = run_bin({ "policy", "check", dir })
    assert.equal(0, check.exit, check.stderr)
    assert.truthy(check.stdout:find("version " .. want, 1, true), check.stdout)
    local reload = w.hup(h)
    assert.is_true(reload.ok)
    assert.equal(want, reload.version)
    assert.is_nil(before.finishes, "the first command ended before the reload: nothing was in flight")
    assert.is_nil(before.times_out, "the second command's budget ran out before the reload was done")

    -- the same request after the reload: clamped to the new 1 s ceiling
    -- the deadline line names the limit it was killed at: 1 s, not the 3 s asked for
    assert.same({ 1000, 1000 }, probe_ceiling(h, "after", 3000))

    -- the commands from before keep the budget and the policy they started with
    local status = S.call(h.url, "/write", { thread = "before-1", body = { path = "go", content = "" } })
    assert.equal(200, status)
    assert.truthy(S.wait_for(function() return before.finishes and before.times_out end, BUDGET + 60000))
    assert.equal(0, before.finishes.exitCode, cjson.encode(before.finishes))
    assert.equal("survived\n", before.finishes.stdout)
    assert.equal(124, before.times_out.exitCode)
    assert.same({ BUDGET, 40000 }, limits_named(before.times_out))
    assert.is_true(before.times_out.durationMs >= BUDGET - 100)
    h:stop()
    assert.equal(0, h:wait().exit)
  end))

  it("a syntax error: the reload is refused, the log names file:line, the old policy keeps answering", async(function()
    local dir = P.dir{ timeouts = timeouts_src(ceiling(1)) }
    local w = reload_watch()
    local h = S.start_sandboxd{ policies = dir, on_output = w.on_output }
    local old = listening_version(h)
    assert.equal(version_of(dir), old)
    assert.same({ 1000, 1000 }, probe_ceiling(h, "t", 1500))

    -- a raised ceiling, then a broken line: the whole file is refused
    local good_part = timeouts_src(ceiling(4))
    local bad_line = line_count(good_part) + 1
    put(dir, "timeouts.lua", good_part .. "bash.kill_grace_ms = = 2 * second\n")
    local reload = w.hup(h)
    assert.is_false(reload.ok)
    assert.equal(old, reload.version)
    local log = h.log()
    assert.truthy(log:find(("policy.error message=\"%s/timeouts.lua:%d: "):format(dir, bad_line), 1, true), log)
    assert.truthy(log:find("policy.reload_failed dir=" .. dir, 1, true), log)
    assert.same({ 1000, 1000 }, probe_ceiling(h, "t", 1500))

    -- the fixed file goes in with the next HUP
    put(dir, "timeouts.lua", good_part)
    reload = w.hup(h)
    assert.is_true(reload.ok)
    assert.equal(version_of(dir), reload.version)
    assert.same({ 1500, 4000 }, probe_ceiling(h, "t", 1500))
    h:stop()
    assert.equal(0, h:wait().exit)
  end))

  it("a failing example: the whole set is refused (the other file's edit too), the log names file:line, the old policy keeps answering", async(function()
    local dir = P.dir{ timeouts = timeouts_src(ceiling(1)) }
    local w = reload_watch()
    local h = S.start_sandboxd{ policies = dir, on_output = w.on_output }
    local old = listening_version(h)
    assert.same({ 1000, 1000 }, probe_ceiling(h, "t", 1500))

    -- errors.lua: fleet_busy must now match a text it does not match; timeouts.lua: a valid raise
    put(dir, "errors.lua", broken_errors())
    put(dir, "timeouts.lua", timeouts_src(ceiling(4)))
    local reload = w.hup(h)
    assert.is_false(reload.ok)
    assert.equal(old, reload.version)
    local log = h.log()
    assert.truthy(log:find(("%s/errors.lua:%d: rule fleet_busy: example matches[8] "):format(dir, FLEET_BUSY_LINE), 1, true), log)
    assert.same({ 1000, 1000 }, probe_ceiling(h, "t", 1500))

    put(dir, "errors.lua", SHIPPED_ERRORS)
    reload = w.hup(h)
    assert.is_true(reload.ok)
    assert.equal(version_of(dir), reload.version)
    assert.same({ 1500, 4000 }, probe_ceiling(h, "t", 1500))
    h:stop()
    assert.equal(0, h:wait().exit)
  end))

  it("100 reloads while 50 commands run: every command answers, with its own output", async(function()
    -- every HUP finds all 50 commands in flight (min_inflight below), each at its own point of
    -- its life (start, output, exit): 100 reloads are 5,000 reload-during-command crossings.
    -- More only lengthen the run: each HUP waits for its reload line, ~1.1 s apart on a loaded
    -- machine (measured alike with 0.1 s and 1.2 s commands), so 500 took ten minutes.
    local WORKERS, RELOADS = 50, 100
    -- two versions to alternate between; the 60 s ceilings let the commands' 60 s budgets
    -- stand, so a command slowed by a loaded machine still answers with its output
    local variants = { timeouts_src(ceiling(60)), timeouts_src(ceiling(61)) }
    local dir = P.dir{ timeouts = variants[2] }
    local versions = { nil, version_of(dir) }
    put(dir, "timeouts.lua", variants[1])
    versions[1] = version_of(dir)
    local w = reload_watch()
    -- --no-walls: this is about reloads under many requests, not about the walls (the other
    -- cases here run walled); unwalled commands keep the thousands of them quick.
    local h = S.start_sandboxd{ policies = dir, on_output = w.on_output,
      args = { "--max-instances", tostring(WORKERS), "--no-walls" } }

    -- 50 threads, each running commands (0.1 to 0.3 s) back to back until the reloads are over
    local stop, inflight, running, answered = false, 0, 0, 0
    local wrong, ran = {}, {}
    for i = 1, WORKERS do
      running = running + 1
      core.go(function()
        local seq = 0
        repeat
          seq = seq + 1
          local tag = ("w%d.%d"):format(i, seq)
          inflight = inflight + 1
          local status, _, body = S.call(h.url, "/exec", { thread = "reload-" .. i, body = {
            command = ("echo %s; sleep 0.%d; echo %s >&2"):format(tag, 1 + seq % 3, tag), timeoutMs = 60000 } })
          inflight = inflight - 1
          answered = answered + 1
          local ok, doc = pcall(cjson.decode, body or "")
          if not (status == 200 and ok and type(doc) == "table" and doc.error == nil and doc.exitCode == 0
              and doc.stdout == tag .. "\n" and doc.stderr == tag .. "\n") then
            wrong[#wrong + 1] = ("%s: status %s, body %s"):format(tag, tostring(status), tostring(body))
          end
        until stop
        ran[i] = seq
        running = running - 1
      end)
    end
    assert.truthy(S.wait_for(function() return inflight == WORKERS end, 60000), "the workers did not start")

    local min_inflight, t0 = math.huge, core.now_ms()
    local ok, err = pcall(function()
      for n = 1, RELOADS do
        local which = n % 2 + 1
        put(dir, "timeouts.lua", variants[which])
        min_inflight = math.min(min_inflight, inflight)
        local reload = w.hup(h)
        if not (reload.ok and reload.version == versions[which]) then
          error(("reload %d: ok=%s version=%s, want %s"):format(n, tostring(reload.ok),
            tostring(reload.version), versions[which]))
        end
      end
    end)
    local reload_ms = core.now_ms() - t0
    stop = true
    assert(ok, err)
    assert.truthy(S.wait_for(function() return running == 0 end, 120000), running .. " workers still waiting")

    assert.equal(RELOADS, #w.reloads)
    assert.same({}, wrong)
    for i = 1, WORKERS do assert.is_true(ran[i] >= 2, "worker " .. i .. " ran " .. tostring(ran[i])) end
    assert.is_true(min_inflight >= 1, "no command was running during some reload")
    local log = h.log()
    assert.is_nil(log:find("sandboxd.exec_failed", 1, true))
    assert.is_nil(log:find("lua.error", 1, true))
    h:stop()
    assert.equal(0, h:wait().exit)
    print(("\n  %d reloads in %.0f ms (%.1f ms each) while %d threads ran %d commands; "
      .. "at least %d in flight at every HUP"):format(RELOADS, reload_ms, reload_ms / RELOADS, WORKERS,
      answered, min_inflight))
  end))
end)

describe("switchboard policy check (the binary)", function()
  it("exits 0 on the shipped set and prints the version a reload of it logs", async(function()
    for _, args in ipairs({ { "policy", "check", "policies" }, { "--policies", "policies", "policy", "check" } }) do
      local r = run_bin(args)
      assert.equal(0, r.exit, r.stderr)
      assert.truthy(r.stdout:find("version " .. P.shipped().version .. "\n", 1, true), r.stdout)
    end
  end))

  it("exits 1 on a broken directory with FILE:LINE for each problem (DIR, --policies or SWITCHBOARD_POLICIES)", async(function()
    local timeouts = timeouts_src(ceiling(1))
    local bad_line = line_count(timeouts) + 1
    local dir = P.dir{
      timeouts = timeouts .. "bash.max_ms = = 3\n",
      errors = broken_errors(),
    }
    for _, case in ipairs({
      { args = { "policy", "check", dir } },
      { args = { "--policies", dir, "policy", "check" } },
      { args = { "policy", "check" }, env = { SWITCHBOARD_POLICIES = dir } },
    }) do
      local r = run_bin(case.args, case.env)
      assert.equal(1, r.exit, r.stdout)
      assert.equal("", r.stdout)
      assert.truthy(r.stderr:find(("%s/timeouts.lua:%d: unexpected symbol near '='\n"):format(dir, bad_line), 1, true), r.stderr)
      assert.truthy(r.stderr:find(("%s/errors.lua:%d: rule fleet_busy: example matches[8] "):format(dir, FLEET_BUSY_LINE), 1, true), r.stderr)
      assert.truthy(r.stderr:find("policy check failed: 2 problems in " .. dir, 1, true), r.stderr)
    end
  end))
end)
