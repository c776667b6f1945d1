-- Black-box: sandboxd's exec lane writes a long answer while its command runs (docs/sandboxd.md
-- "A long answer as it comes", issue 43's 1 MB row). Two real walled sandboxd, one with the lane
-- and one with timeouts sandbox.exec_lane = false (the Lua path, which writes the document after
-- the command's end), run the same long-output commands and must answer the same documents
-- (durationMs aside); the lane's answer must start `{"stdout":"` (the document began while the
-- command ran), keep beating inside stdout while the command is quiet (one held-back byte per
-- heartbeat, timed on the client), end a deadline's and a truncation's document in Lua with the
-- stdout already sent, answer a command the drain's end kills in the failure shape with the
-- stdout it sent, and stop a command whose client went away mid-stream.
local cjson = require("cjson")
local core = require("switchboard.core")
local S = require("support.sandbox")
local policies = require("support.policies")

local HEARTBEAT_MS = 1000
local MAX_OUTPUT = 1280 * 1024 -- (sandbox.max_answer_bytes holds two streams of it escaped)

local function policy_dir(lane, drain)
  return policies.dir{
    timeouts = function(src)
      return src .. "\n" .. S.FAST .. ("\nsandbox.heartbeat_ms = %d\n"):format(HEARTBEAT_MS)
        .. ('sandbox.sleep_after = "10m"\nprocess.max_output_bytes = %d\n'):format(MAX_OUTPUT)
        .. ("server.drain_ms = %s\n"):format(drain or "20 * second") .. (lane and "" or "sandbox.exec_lane = false\n")
    end,
    isolation = function(src) return src .. "\nworkspace_max_bytes = 32 * MiB\nspare_instances = 0\n" end,
  }
end

local describe_walls = require("support.walls").probe(policy_dir(true),
  { describe = describe, it = it, pending = pending })

after_each(S.cleanup_servers)
teardown(S.cleanup)

-- The answer's raw body, its document without durationMs, and each chunk's arrival
-- ({at = ms, bytes = n}) as the client saw them.
local function exec(h, thread, body, signal, on_chunk)
  local arrivals = {}
  local status, _, raw = S.call(h.url, "/exec", { thread = thread, deadline_ms = 120000, body = body,
    signal = signal, on_chunk = function(chunk)
      arrivals[#arrivals + 1] = { at = core.now_ms(), bytes = #chunk, text = chunk }
      if on_chunk then on_chunk(chunk) end
    end })
  if signal and signal.aborted then return nil, raw, arrivals end
  assert.equal(200, status, raw)
  local doc = cjson.decode(raw)
  doc.durationMs = nil
  return doc, raw, arrivals
end

local function lane_count(h, outcome)
  return S.metric(h, 'switchboard_exec_lane_total{outcome="' .. outcome .. '"}')
end

local function streamed(raw) return raw:find('^ *{"stdout":"') ~= nil end

-- 1 MiB+ of numbered lines (seq 1 170000: 1,057,896 bytes), what the command prints
local function lines(n)
  local t = {}
  for i = 1, n do t[i] = tostring(i) end
  return table.concat(t, "\n") .. "\n"
end

local function servers()
  local on = S.start_sandboxd{ policies = policy_dir(true) }
  local off = S.start_sandboxd{ policies = policy_dir(false) }
  -- the thread's first command goes through Lua: it makes the instance, which is then armed
  for _, h in ipairs({ on, off }) do assert.equal(0, exec(h, "stream", { command = "true" }).exitCode) end
  return on, off
end

local function stop(on, off)
  for _, h in ipairs({ on, off }) do
    h:stop()
    local result = h:wait()
    assert.equal(0, result.exit, h.log())
    assert.is_nil(h.log():find("Sanitizer", 1, true), h.log())
  end
end

describe_walls("sandboxd's exec lane, a long answer", function()
  it("streams stdout as it comes and answers the documents the Lua path does", function()
    core.run(function()
      local on, off = servers()
      -- 5-byte and 7-byte periods of multi-byte and invalid sequences: the pipe's reads (pages
      -- of 4 KiB and more) cut sequences across chunks
      local mixed = "yes $'\\xe2\\x82\\xacA\\xff' | head -c 300000; yes $'\\xf0\\x9f\\x98\\x80\\xc3\\xa9' "
        .. "| head -c 300001; printf '\\xe2\\x82'"
      local cases = {
        { name = "1 MiB of lines", body = { command = "seq 1 170000" } },
        { name = "invalid UTF-8 across chunks", body = { command = mixed } },
        { name = "long stdout and stderr", body = { command = "seq 1 30000; seq 1 20000 >&2; exit 4" }, back = true },
        { name = "deadline after the stream began",
          body = { command = "head -c 200000 /dev/zero | tr '\\0' a; sleep 30", timeoutMs = 1500 }, back = true },
        { name = "truncated at max_output",
          body = { command = ("head -c %d /dev/zero | tr '\\0' b"):format(MAX_OUTPUT + 300000) }, back = true },
      }
      local answered, back = lane_count(on, "answered"), lane_count(on, "handed_back")
      local docs = {}
      for i, case in ipairs(cases) do
        local a, raw_a = exec(on, "stream", case.body)
        local b, raw_b = exec(off, "stream", case.body)
        assert.same(b, a, case.name)
        assert.truthy(streamed(raw_a), case.name .. ": the lane's answer did not start with stdout: " .. raw_a:sub(1, 40))
        assert.falsy(streamed(raw_b), case.name .. ": the Lua path's answer")
        if case.back then back = back + 1 else answered = answered + 1 end
        docs[i] = a
      end
      assert.equal(lines(170000), docs[1].stdout)
      assert.equal(0, docs[1].exitCode)
      assert.is_nil(docs[1].stdoutBase64)
      local bytes = core.crypto.base64_decode(docs[2].stdoutBase64)
      assert.equal(600003, #bytes)
      assert.equal("\xe2\x82\xacA\xff", bytes:sub(1, 5))
      assert.equal("\xe2\x82", bytes:sub(-2))
      assert.equal("\u{20AC}A\u{FFFD}", docs[2].stdout:sub(1, 7))
      assert.equal("\u{FFFD}\u{FFFD}", docs[2].stdout:sub(-6)) -- the cut sequence at the very end
      assert.equal(4, docs[3].exitCode)
      assert.equal(lines(20000), docs[3].stderr)
      assert.equal(124, docs[4].exitCode)
      assert.equal(("a"):rep(200000), docs[4].stdout)
      assert.truthy(docs[4].stderr:find("timed out", 1, true), docs[4].stderr)
      assert.equal(MAX_OUTPUT, #docs[5].stdout)
      assert.truthy(docs[5].stderr:find(tostring(MAX_OUTPUT), 1, true), docs[5].stderr)
      assert.equal(answered, lane_count(on, "answered"))
      assert.equal(back, lane_count(on, "handed_back"))
      stop(on, off)
    end)
  end)

  it("beats inside stdout while the command is quiet: one held byte per heartbeat", function()
    core.run(function()
      local on, off = servers()
      local body = { command = "head -c 204800 /dev/zero | tr '\\0' q; sleep 4.5; echo done" }
      local doc, raw, arrivals = exec(on, "stream", body)
      assert.truthy(streamed(raw), raw:sub(1, 40))
      assert.equal(("q"):rep(204800) .. "done\n", doc.stdout)
      assert.same(exec(off, "stream", body), doc)
      -- from the first chunk past 200 KiB (the stream's start, before the sleep) to the end
      local seen, first = 0, nil
      for i, a in ipairs(arrivals) do
        seen = seen + a.bytes
        if seen >= 100000 and not first then first = i end
      end
      assert.truthy(first, "no long stream arrived")
      local beats, worst = 0, 0
      for i = first + 1, #arrivals do
        local gap = arrivals[i].at - arrivals[i - 1].at
        if gap > worst then worst = gap end
        if arrivals[i].bytes == 1 then beats = beats + 1 end
      end
      -- 4.5 s quiet at one beat a second: 4 single held bytes (3 at least on a stalled loop),
      -- and never more than two intervals without a byte
      assert.truthy(beats >= 3, ("%d one-byte beats during the sleep"):format(beats))
      assert.truthy(worst <= 2 * HEARTBEAT_MS, ("a gap of %.0f ms between bytes"):format(worst))
      stop(on, off)
    end)
  end)

  it("answers a command the drain kills mid-stream in the failure shape, with the stdout it sent", function()
    core.run(function()
      local h = S.start_sandboxd{ policies = policy_dir(true, "1 * second") }
      assert.equal(0, exec(h, "stream", { command = "true" }).exitCode) -- armed
      local running, answered = core.signal(), core.signal()
      local seen, doc, raw = 0, nil, nil
      core.go(function()
        doc, raw = exec(h, "stream", { command = "head -c 200000 /dev/zero | tr '\\0' s; sleep 60" }, nil,
          function(chunk)
            seen = seen + #chunk
            if seen > 100000 then running:abort("streaming") end
          end)
        answered:abort("answered")
      end)
      core.sleep(30000, running)
      assert.truthy(running.aborted, "the stream never began")
      h:stop() -- TERM: the drain (1 s) ends with the lane's command killed
      core.sleep(60000, answered)
      assert.truthy(answered.aborted, "no answer after the drain: " .. h.log():sub(-3000))
      assert.truthy(streamed(raw), raw:sub(1, 40))
      assert.truthy(doc.error and doc.error:find("stopped", 1, true), tostring(doc.error))
      assert.equal(127, doc.exitCode)
      assert.equal(("s"):rep(200000), doc.stdout)
      local result = h:wait()
      assert.equal(0, result.exit, h.log():sub(-2000))
      assert.is_nil(h.log():find("Sanitizer", 1, true), h.log())
    end)
  end)

  it("starts the document past the policy's sandbox.stream_at_bytes, read again on a reload", function()
    core.run(function()
      local dir = policy_dir(true)
      local h = S.start_sandboxd{ policies = dir }
      assert.equal(0, exec(h, "stream", { command = "true" }).exitCode) -- armed
      local body = { command = "head -c 20000 /dev/zero | tr '\\0' s" }
      local answered = lane_count(h, "answered")
      -- the shipped 64 KiB: 20,000 bytes are answered whole, after the command's end
      local doc, raw = exec(h, "stream", body)
      assert.equal(("s"):rep(20000), doc.stdout)
      assert.falsy(streamed(raw), raw:sub(1, 40))
      assert.equal(answered + 1, lane_count(h, "answered"))
      -- 4 KiB after SIGHUP: the same command's document starts while it runs, answered in C
      local f = assert(io.open(dir .. "/timeouts.lua", "a"))
      f:write("\nsandbox.stream_at_bytes = 4 * KiB\n")
      f:close()
      local function reloads() local _, n = h.log():gsub(" sandboxd%.reload [^\n]*ok=true", "") return n end
      local before = reloads()
      h:stop("HUP")
      assert.truthy(S.wait_for(function() return reloads() > before end, 60000), h.log():sub(-2000))
      -- the reload dropped every arm: the next command goes through Lua and arms again
      assert.equal(0, exec(h, "stream", { command = "true" }).exitCode)
      answered = lane_count(h, "answered")
      doc, raw = exec(h, "stream", body)
      assert.equal(("s"):rep(20000), doc.stdout)
      assert.truthy(streamed(raw), raw:sub(1, 40))
      assert.equal(answered + 1, lane_count(h, "answered"))
      h:stop()
      local result = h:wait()
      assert.equal(0, result.exit, h.log():sub(-2000))
      assert.is_nil(h.log():find("Sanitizer", 1, true), h.log())
    end)
  end)

  it("kills the command when its client goes away mid-stream", function()
    core.run(function()
      local on, off = servers()
      local gone = core.signal()
      local seen = 0
      local _, raw = exec(on, "stream", {
        command = "rm -f /workspace/survived; head -c 300000 /dev/zero | tr '\\0' z; sleep 4; touch /workspace/survived",
      }, gone, function(chunk)
        seen = seen + #chunk
        if seen > 100000 then gone:abort("client leaves") end -- inside the streamed stdout
      end)
      assert.truthy(gone.aborted, "the stream never passed 100 KB: " .. tostring(raw and #raw))
      core.sleep(6000) -- past the command's sleep: it would have touched the file by now
      local doc = exec(on, "stream", { command = "test -e /workspace/survived && echo survived || echo killed" })
      assert.equal("killed\n", doc.stdout, doc.stderr)
      stop(on, off)
    end)
  end)
end)
