-- Black-box: sandboxd's exec lane (docs/sandboxd.md "The exec lane", issue 43 rows 1-3). Two
-- real walled sandboxd, one with the lane (the shipped default) and one with
-- timeouts sandbox.exec_lane = false, run the same commands — exit 0, exit 3 with stderr,
-- output that is not UTF-8, output over max_output, env from the request, a command its
-- deadline kills, a command the kernel would refuse (E2BIG-size), a command that spans
-- heartbeats — and answer the same documents (durationMs aside). The lane's metric says which
-- commands the lane ran: the ordinary ones answered in C, the others handed back to Lua; the
-- supervisor's count of its Lua objects shows an answered command makes none.
local cjson = require("cjson")
local core = require("switchboard.core")
local S = require("support.sandbox")
local policies = require("support.policies")

local function policy_dir(lane, sleep_after, extra)
  return policies.dir{
    timeouts = function(src)
      return src .. "\n" .. S.FAST .. ('\nsandbox.sleep_after = "%s"\n'):format(sleep_after or "10m")
        .. "process.max_output_bytes = 4096\nserver.drain_ms = 20 * second\n"
        .. (lane and "" or "sandbox.exec_lane = false\n") .. (extra or "")
    end,
    isolation = function(src) return src .. "\nworkspace_max_bytes = 32 * MiB\nspare_instances = 0\n" end,
  }
end

local describe_walls = require("support.walls").probe(policy_dir(true),
  { describe = describe, it = it, pending = pending })

after_each(S.cleanup_servers)
teardown(S.cleanup)

-- The answer's raw body (heartbeat spaces included), its document without durationMs, and the
-- head's headers the lane writes itself (its made-once lines, sb_http_head_lines) or frames.
local HEAD = { "content-type", "cache-control", "transfer-encoding", "content-length", "connection" }
local function exec(h, thread, body)
  local status, headers, raw = S.call(h.url, "/exec", { thread = thread, deadline_ms = 120000, body = body })
  assert.equal(200, status, raw)
  local doc = cjson.decode(raw)
  doc.durationMs = nil
  local head = {}
  for _, name in ipairs(HEAD) do head[name] = headers[name] or "(none)" end
  return doc, raw, head
end

local function lane_count(h, outcome)
  return S.metric(h, 'switchboard_exec_lane_total{outcome="' .. outcome .. '"}')
end

local CASES = {
  { name = "exit 0", body = { command = "echo hello" } },
  { name = "exit 3 with stderr", body = { command = "echo out; echo 'went wrong' >&2; exit 3" } },
  { name = "not UTF-8", body = { command = "printf 'a\\377\\376b'; printf '\\300x' >&2" } },
  { name = "over max_output", body = { command = "head -c 10000 /dev/zero | tr '\\0' a" }, back = true },
  { name = "env from the request", body = { command = "echo \"$GREETING $HOME\"", env = { GREETING = "hi there" } } },
  { name = "timeout", body = { command = "sleep 30", timeoutMs = 300 }, back = true },
  -- ended by a signal: the C result's signal sends it to Lua (a hand-back), as the Lua path answers it
  { name = "killed by a signal", body = { command = "echo before; kill -KILL $$" }, back = true },
  { name = "E2BIG-size command", body = { command = ": " .. ("x"):rep(140000) }, lua = true },
  { name = "spans heartbeats", body = { command = "sleep 0.5; echo slept" }, beats = true },
  { name = "exit 0 after the others", body = { command = "pwd; id -u | wc -c" } },
}

describe_walls("sandboxd's exec lane", function()
  it("answers every case as the Lua path does, and counts the commands it ran", function()
    core.run(function()
      local on = S.start_sandboxd{ policies = policy_dir(true) }
      local off = S.start_sandboxd{ policies = policy_dir(false) }
      -- the thread's first command goes through Lua: it makes the instance, which is then armed
      for _, h in ipairs({ on, off }) do
        local doc = exec(h, "lane", { command = "true" })
        assert.equal(0, doc.exitCode, doc.stderr)
      end
      local answered, back = 0, 0
      for _, case in ipairs(CASES) do
        local a, raw_a, head_a = exec(on, "lane", case.body)
        local b, raw_b, head_b = exec(off, "lane", case.body)
        assert.same(b, a, case.name)
        assert.same(head_b, head_a, case.name .. ": the head's headers")
        if case.beats then
          assert.truthy(raw_a:find("^ +{"), case.name .. ": no heartbeat from the lane: " .. raw_a:sub(1, 40))
          assert.truthy(raw_b:find("^ +{"), case.name .. ": no heartbeat from Lua")
        end
        if case.back then back = back + 1 elseif not case.lua then answered = answered + 1 end
      end
      -- what the cases asserted, seen from the answers themselves
      local docs = {}
      for i, case in ipairs(CASES) do docs[i] = exec(on, "lane", case.body) end
      assert.equal("hello\n", docs[1].stdout)
      assert.equal(3, docs[2].exitCode)
      assert.equal("went wrong\n", docs[2].stderr)
      assert.is_string(docs[3].stdoutBase64)
      assert.truthy(docs[4].stderr:find("truncated", 1, true) or docs[4].stderr:find("4096", 1, true), docs[4].stderr)
      assert.truthy(docs[5].stdout:find("^hi there "), docs[5].stdout)
      assert.equal(124, docs[6].exitCode)
      assert.equal(137, docs[7].exitCode)
      assert.equal("before\n", docs[7].stdout)
      assert.equal(126, docs[8].exitCode)
      assert.equal("slept\n", docs[9].stdout)
      -- each case ran twice on the lane's server; the off server's lane ran nothing
      assert.equal(2 * answered, lane_count(on, "answered"))
      assert.equal(2 * back, lane_count(on, "handed_back"))
      assert.equal(0, lane_count(off, "answered") + lane_count(off, "handed_back"))
      -- a command in the lane when the server is stopped: the drain waits for it, and nothing
      -- of the lane is left behind (the sanitized build reports leaks and bad accesses here)
      local ended, running = core.signal(), core.signal()
      core.go(function()
        local status, _, raw = S.call(on.url, "/exec", { thread = "lane", deadline_ms = 120000,
          body = { command = "sleep 2; echo drained" },
          on_chunk = function() running:abort("heartbeat") end }) -- its first space: it runs
        assert.equal(200, status, raw)
        assert.equal("drained\n", cjson.decode(raw).stdout)
        ended:abort("answered")
      end)
      core.sleep(30000, running)
      assert.truthy(running.aborted, "the drain's command never sent a heartbeat")
      on:stop()
      core.sleep(30000, ended)
      assert.truthy(ended.aborted, "the lane's command was not answered during the drain")
      for _, h in ipairs({ on, off }) do
        h:stop()
        local result = h:wait()
        assert.equal(0, result.exit, h.log())
        assert.is_nil(h.log():find("Sanitizer", 1, true), h.log())
      end
    end)
  end)

  -- The descriptors sandboxd holds open whose link names `name` (a counter file of an instance).
  local function held(h, name)
    local n = 0
    local ls = io.popen("ls -l /proc/" .. h.pid .. "/fd 2>/dev/null")
    for line in ls:lines() do
      if line:find(name, 1, true) then n = n + 1 end
    end
    ls:close()
    return n
  end

  it("holds the counters open, logs each command with its peer, and settles a hand-back against the instance it ran in after a reload", function()
    core.run(function()
      local h = S.start_sandboxd{ policies = policy_dir(true) }
      assert.equal(0, exec(h, "reload", { command = "true" }).exitCode) -- armed
      -- the descriptor budget has room here: the armed instance's two counter files stay open
      local deadline = core.now_ms() + 30000
      while held(h, "pids.events") == 0 and core.now_ms() < deadline do core.sleep(50) end
      assert.equal(1, held(h, "pids.events"))
      assert.equal(1, held(h, "memory.events") + held(h, "memory.oom_control"))
      assert.equal("in the lane\n", exec(h, "reload", { command = "echo in the lane" }).stdout)
      assert.equal(1, lane_count(h, "answered"))
      -- a command that fills the workspace is handed back; a SIGHUP (policy reload) while it
      -- runs drops every arming, and the hand-back still settles against the instance it ran in
      local running = core.signal()
      local doc
      local answered = core.signal()
      core.go(function()
        local status, _, raw = S.call(h.url, "/exec", { thread = "reload", deadline_ms = 120000,
          body = { command = "sleep 1; head -c 40000000 /dev/zero > fill" },
          on_chunk = function() running:abort("heartbeat") end })
        assert.equal(200, status, raw)
        doc = cjson.decode(raw)
        answered:abort("answered")
      end)
      core.sleep(30000, running)
      assert.truthy(running.aborted, "the command never sent a heartbeat")
      os.execute("kill -HUP " .. h.pid)
      core.sleep(60000, answered)
      assert.truthy(answered.aborted, "no answer")
      assert.equal(1, doc.exitCode, doc.stderr)
      assert.truthy(doc.stderr:find("No space left on device", 1, true), doc.stderr)
      assert.truthy(doc.stderr:find("refused: no space left", 1, true),
        "the hand-back was not settled (no words for the full workspace): " .. doc.stderr)
      assert.equal(1, lane_count(h, "handed_back"))
      h:stop()
      h:wait()
      -- every command the lane ran has its request line, with the peer's address
      local log = h.log()
      -- (the sanitized build reports a freed arming or program touched by the hand-back here)
      assert.is_nil(log:find("Sanitizer", 1, true), log)
      local lines = {}
      for line in log:gmatch("[^\n]*sandboxd%.request[^\n]*lane=1[^\n]*") do lines[#lines + 1] = line end
      assert.equal(2, #lines, log)
      for _, line in ipairs(lines) do assert.truthy(line:find("remote=127.0.0.1", 1, true), line) end
      assert.truthy(lines[2]:find("handed_back=true", 1, true), lines[2])
    end)
  end)

  -- The lane tallies its answered commands in C and reports them to Lua in batches
  -- (sandbox.exec_lane_report_ms, 10 s here: longer than the case): a scrape still sees every
  -- command answered before it, and each command has its request line, written as it ends —
  -- across a reload that drops the arming while a command runs, and after the server stops.
  -- The request lines of /exec in a server's log (those containing `word`, when given).
  local function lines_of(log, word)
    local n = 0
    for line in log:gmatch("[^\n]*sandboxd%.request[^\n]*") do
      if line:find("route=/exec", 1, true) and (word == nil or line:find(word, 1, true)) then n = n + 1 end
    end
    return n
  end

  it("counts and logs every command it answers, across a reload mid-run and the server's stop", function()
    core.run(function()
      local h = S.start_sandboxd{ policies = policy_dir(true, "10m", "sandbox.exec_lane_report_ms = 10 * second\n") }
      local sent = 0
      local function send(command)
        sent = sent + 1
        return exec(h, "tally", { command = command })
      end
      assert.equal(0, send("true").exitCode) -- armed
      for i = 1, 100 do assert.equal(i .. "\n", send("echo " .. i).stdout) end
      -- a command in the lane while a SIGHUP reload drops every arming
      local running, answered = core.signal(), core.signal()
      local slow
      core.go(function()
        local status, _, raw = S.call(h.url, "/exec", { thread = "tally", deadline_ms = 120000,
          body = { command = "sleep 1; echo slow" }, on_chunk = function() running:abort("heartbeat") end })
        assert.equal(200, status, raw)
        slow = cjson.decode(raw)
        answered:abort("answered")
      end)
      sent = sent + 1
      core.sleep(30000, running)
      assert.truthy(running.aborted, "the slow command never sent a heartbeat")
      os.execute("kill -HUP " .. h.pid)
      assert.truthy(S.wait_for(function() return h.log():find("policy.reloaded", 1, true) end, 30000),
        "no reload: " .. h.log())
      core.sleep(60000, answered)
      assert.truthy(answered.aborted, "the slow command was not answered")
      assert.equal("slow\n", slow.stdout)
      for i = 101, 200 do assert.equal(i .. "\n", send("echo " .. i).stdout) end
      -- every command ended ordinarily: each counted once, whichever path answered it
      -- (each line is written after its answer: the last ones may still be on their way here)
      S.wait_for(function() return lines_of(h.log()) >= sent end, 30000)
      assert.equal(sent, lines_of(h.log()))
      local lane_lines = lines_of(h.log(), "lane=1")
      assert.is_true(lane_lines >= 195, "the lane ran " .. lane_lines .. " of " .. sent)
      assert.equal(lane_lines, lane_count(h, "answered"))
      assert.equal(0, lane_count(h, "handed_back"))
      assert.equal(sent, S.metric(h, 'switchboard_commands_total{outcome="exit"}'))
      assert.equal(sent, S.metric(h, "switchboard_command_duration_seconds_count"))
      h:stop()
      h:wait()
      local log = h.log()
      assert.is_nil(log:find("Sanitizer", 1, true), log)
      assert.equal(sent, lines_of(log))
      assert.equal(lane_lines, lines_of(log, "lane=1"))
      for line in log:gmatch("[^\n]*sandboxd%.request[^\n]*lane=1[^\n]*") do
        assert.truthy(line:find("thread=t%-%x+") and line:find("remote=127.0.0.1", 1, true)
          and line:find("status=200", 1, true) and line:find("duration_ms=%d+%.%d"), line)
      end
    end)
  end)

  -- A command the lane answers is C's from its spawn to its answer: no Lua record (userdata),
  -- no result table — the supervisor's own count of the Lua objects it made does not move.
  it("answers its commands without a Lua object per command", function()
    core.run(function()
      local h = S.start_sandboxd{ policies = policy_dir(true) }
      local function objects()
        return S.metric(h, 'switchboard_proc_lua_objects{kind="record"}'),
          S.metric(h, 'switchboard_proc_lua_objects{kind="result"}')
      end
      assert.equal(0, exec(h, "objects", { command = "true" }).exitCode) -- armed
      -- the arming is seen once a command is answered by the lane
      local deadline = core.now_ms() + 30000
      while lane_count(h, "answered") == 0 and core.now_ms() < deadline do
        assert.equal(0, exec(h, "objects", { command = "true" }).exitCode)
      end
      local answered = lane_count(h, "answered")
      assert.is_true(answered > 0, "the lane answered nothing")
      local records, results = objects()
      assert.is_number(records, "no switchboard_proc_lua_objects in /metrics")
      local N = 30
      for i = 1, N do
        local doc = exec(h, "objects", { command = "echo " .. i .. "; echo e >&2" })
        assert.equal(i .. "\n", doc.stdout)
        assert.equal("e\n", doc.stderr)
      end
      assert.equal(answered + N, lane_count(h, "answered"))
      local records_after, results_after = objects()
      assert.equal(records, records_after, "Lua records made by the lane's commands")
      assert.equal(results, results_after, "Lua result tables made by the lane's commands")
      -- a hand-back still gets its table (made then, from the C result)
      assert.equal(124, exec(h, "objects", { command = "sleep 30", timeoutMs = 300 }).exitCode)
      assert.equal(1, lane_count(h, "handed_back"))
      assert.is_true(select(2, objects()) >= results + 1, "no result table for the hand-back")
      -- the records C owns are freed once their handles close (the sanitized build reports a
      -- leak or a bad access here)
      h:stop()
      assert.equal(0, h:wait().exit, h.log())
      assert.is_nil(h.log():find("Sanitizer", 1, true), h.log())
    end)
  end)

  it("keeps the idle clock of an instance used only through the lane, and still sleeps it once idle", function()
    core.run(function()
      local h = S.start_sandboxd{ policies = policy_dir(true, "2s", "sandbox.exec_lane_report_ms = 10 * second\n") }
      assert.equal(0, exec(h, "clock", { command = "true" }).exitCode) -- armed
      -- 6 s of short commands, each well inside the 2 s idle period of the one before: the idle
      -- watch must see their last use (reported 10 s late otherwise) and never sleep the instance
      local t0 = core.now_ms()
      while core.now_ms() - t0 < 6000 do
        assert.equal(0, exec(h, "clock", { command = "true" }).exitCode)
        core.sleep(200)
      end
      assert.is_nil(h.log():find("sandboxd.instance_slept", 1, true), h.log())
      assert.is_true(lane_count(h, "answered") >= 10)
      -- idle now: it sleeps
      assert.truthy(S.wait_for(function() return h.log():find("sandboxd.instance_slept", 1, true) end, 30000),
        "the idle instance never slept")
    end)
  end)

  it("keeps an instance awake while its command runs in the lane, past several idle periods", function()
    core.run(function()
      local h = S.start_sandboxd{ policies = policy_dir(true, "1s") }
      assert.equal(0, exec(h, "idle", { command = "true" }).exitCode) -- armed
      -- the idle watch looks every second; each look must find the lane's command running
      local doc = exec(h, "idle", { command = "sleep 4; echo awake" })
      assert.equal("awake\n", doc.stdout, doc.stderr)
      assert.equal(0, doc.exitCode)
      assert.equal(1, lane_count(h, "answered"))
    end)
  end)
end)
