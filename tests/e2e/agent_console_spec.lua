-- Agent runs through `switchboard console` as a black box: the real binary, free-text asks
-- on its stdin, the model stand-in (tests/support/model_standin.py) speaking the Messages API's
-- streamed events, commands on the local backend (or the scripted sandbox stand-in where the
-- sandbox's failures are the point). Each case checks the card the console prints and what the
-- model was sent.
local core = require("switchboard.core")
local cjson = require("cjson")
local bin = require("support.bin")
local files = require("support.files")
local procs = require("support.procs")
local cards = require("support.cards")
local model = require("support.model")
local policies = require("support.policies")
local sandbox = require("support.sandbox")

local BIN = bin.path
if BIN:sub(1, 1) ~= "/" then BIN = os.getenv("PWD") .. "/" .. BIN end

-- Scaled-down numbers: retries after 100 ms; bash budgets of 1 s (default) and 3 s (ceiling).
local AGENTS_FAST = [[
model_api.retry.first_ms = 100
model_api.retry.max_ms = 400
]]
local TIMEOUTS_FAST = [[
bash.default_ms = 1 * second
bash.max_ms = 3 * second
bash.floor_ms = 100
bash.kill_grace_ms = 300
sandbox.default_budget_ms = 1 * second
sandbox.heartbeat_ms = 100
call.margin_ms = 1 * second
fleet_busy.waits_ms = { 1 * second }
fleet_busy.every_ms = 1 * second
fleet_busy.max_wait_ms = 2 * second
]]

local function policy_dir(o)
  o = o or {}
  return policies.dir{
    timeouts = function(src) return src .. "\n" .. TIMEOUTS_FAST .. (o.timeouts or "") .. "\n" end,
    agents = function(src) return src .. "\n" .. AGENTS_FAST .. (o.agents or "") .. "\n" end,
    execution = o.execution and function(src) return src .. "\n" .. o.execution .. "\n" end or nil,
    github = o.github and function(src) return src .. "\n" .. o.github .. "\n" end or nil,
  }
end

local function text_answer(t) return { content = { { type = "text", text = t } } } end
local function tool(name, input, extra)
  local a = { content = { { type = "tool_use", name = name, input = input } } }
  for k, v in pairs(extra or {}) do a[k] = v end
  return a
end

describe("agent runs in switchboard console", function()
  local state, m

  before_each(function()
    state = files.tmpdir()
  end)
  after_each(function()
    if m then core.run(function() m.stop() end) end
    m = nil
    os.execute("rm -rf '" .. state .. "'")
    policies.cleanup()
    sandbox.cleanup_servers()
  end)

  -- Starts the stand-in with `answers`, then runs `body` (a bash script with BIN, POL, STATE,
  -- ANTHROPIC_BASE_URL and ANTHROPIC_API_KEY set; CONSOLE expands to the console's command
  -- line) or, when body is a plain list of lines, pipes them into the console.
  -- Returns the console's stdout, stderr and the requests the model got.
  local function session(answers, body, o)
    o = o or {}
    local pol = o.policies or policy_dir()
    local out, err, reqs, r
    core.run(function()
      m = model.start()
      m:script(answers)
      local env = bin.env{ HOME = state, SWITCHBOARD_STATE_DIR = state, BIN = BIN, POL = pol,
                           ANTHROPIC_BASE_URL = m.url, ANTHROPIC_API_KEY = m.key,
                           GH_TOKEN = o.gh_token or "specs-own-token", STATE = state }
      for k, v in pairs(o.env or {}) do env[k] = v or nil end
      local console = '"$BIN" --policies "$POL" console' .. (o.args and (" " .. o.args) or "")
      local script
      if type(body) == "table" then
        script = console .. " > out 2> err <<'EOF'\n" .. table.concat(body, "\n") .. "\nEOF\necho \"exit=$?\" >> out"
      else
        script = body:gsub("CONSOLE", console)
      end
      local proc = assert(core.spawn{ argv = { "bash", "-c", "set -u\n" .. script }, env = env,
                                      cwd = state, deadline_ms = 120000 })
      r = proc:wait()
      reqs = m:requests()
    end)
    assert.is_false(r.timed_out, "the session did not end: " .. tostring(r.stderr))
    out = files.read(state .. "/out") or ""
    err = files.read(state .. "/err") or ""
    return out, err, reqs
  end

  local function transcript_text()
    local p = io.popen("cat '" .. state .. "'/transcripts/*/*.jsonl 2>/dev/null")
    local s = p:read("a")
    p:close()
    return s
  end

  it("runs a multi-turn ask that writes, reads and runs a file, and prints the final card", function()
    local out, err, reqs = session({
      -- awkward splits: one character per input_json_delta, seven bytes per socket write
      { content = { { type = "text", text = "Writing it." },
                    { type = "tool_use", name = "write_file", input = { path = "hello.txt", content = "hi\n" } } },
        split = 1, usage = { input_tokens = 1200, output_tokens = 40 } },
      tool("read_file", { path = "hello.txt" }, { split = 2 }),
      { content = { { type = "tool_use", name = "bash", input = { command = "cat hello.txt; echo \"q\\\"uote\" é" } },
                    { type = "server_thinking_of_the_future" } }, split = 5, chunk = 3 },
      text_answer("hello.txt contains hi."),
    }, { "agent:coding make a file hello.txt containing hi, then show it" })
    assert.matches("exit=0\n", out)
    local c = cards.find(out, "^%[main%] agent:coding")
    assert.is_not_nil(c, out .. err)
    assert.matches("^%[main%] agent:coding · local\nnote: local executor: unwalled[^\n]*\n> make a file hello.txt containing hi, then show it\n"
      .. "✓ done after 4 turns in [%d.]+s · [%d,]+ tokens in / 100 out · cache [%d,]+ read / [%d,]+ written · %$%d+%.%d%d\nhello.txt contains hi.$", c)
    assert.equal("hi\n", files.read(state .. "/workspaces/" .. (io.popen("ls " .. state .. "/workspaces"):read("l")) .. "/hello.txt"))
    assert.equal(4, #reqs)
    local h = reqs[1].headers
    assert.equal(m.key, h["x-api-key"])
    assert.equal("2023-06-01", h["anthropic-version"])
    assert.is_true(reqs[1].body.stream)
    assert.same({ "bash", "read_file", "write_file", "edit_file", "glob", "grep", "list", "web_fetch", "screenshot", "todo_write" }, model.tool_names(reqs[1]))
    assert.matches("1 s (1000 ms) by default, at most 3 s (3000 ms)", reqs[1].body.tools[1].description, 1, true)
    assert.matches("larger timeoutMs", reqs[1].body.tools[1].description, 1, true)
    assert.equal("wrote 3 bytes to hello.txt", model.tool_results(reqs[2])[1].content)
    assert.equal("     1\thi", model.tool_results(reqs[3])[1].content) -- numbered as cat -n
    assert.equal('hi\nq"uote é', model.tool_results(reqs[4])[1].content)
    -- the assistant turns went back as they came, tool_use input decoded from its fragments
    -- (the coding agent thinks: its thinking block first, sent back as it came)
    local thought = reqs[4].body.messages[6].content[1]
    assert.equal("thinking", thought.type)
    assert.equal("(stand-in thinking)", thought.thinking)
    local back = reqs[4].body.messages[6].content[2]
    assert.equal("tool_use", back.type)
    assert.equal('cat hello.txt; echo "q\\"uote" é', back.input.command)
    -- the transcript holds the turns, and never the key
    local t = transcript_text()
    assert.matches('"type":"tool_result"', t)
    assert.matches('"state":"done"', t)
    assert.not_matches(m.key, t, 1, true)
    assert.not_matches(m.key, out .. err, 1, true)
  end)

  it("clamps the model's timeoutMs, feeds the 124 line back, and the model retries with more time", function()
    local trace = state .. "/trace.jsonl"
    local out, err, reqs = session({
      tool("bash", { command = "sleep 1.6; echo slow-done" }),                     -- default 1 s
      tool("bash", { command = "sleep 1.6; echo slow-done", timeoutMs = 99999999 }), -- → 3 s
      text_answer("It needed more time."),
    }, { "agent:coding do the slow thing" }, { args = "--trace " .. trace })
    local c = cards.find(out, "^%[main%] agent:coding")
    assert.matches("✓ done after 3 turns", c or out .. err, 1, true)
    local first = model.tool_results(reqs[2])[1].content
    assert.matches("^exit 124:", first)
    assert.matches("timeoutMs", first, 1, true)
    assert.matches("up to 3000", first, 1, true)
    assert.matches("slow%-done", model.tool_results(reqs[3])[1].content)
    -- the executor got the clamped budget (the span carries timeout_ms)
    local spans = {}
    for line in (files.read(trace) or ""):gmatch("[^\n]+") do
      local s = cjson.decode(line)
      if s.name == "exec.exec" then spans[#spans + 1] = s end
    end
    assert.equal(3, #spans) -- the run's facts (agent/facts.lua), then the two calls
    assert.equal(3000, spans[3].attributes.timeout_ms)
  end)

  it("retries 429 (retry-after), 529, an error event and a stream cut mid-answer, then finishes", function()
    local t0 = core.now_ms()
    local out, err, reqs = session({
      { status = 429, headers = { ["retry-after"] = "1" }, error = { type = "rate_limit_error", message = "slow down" } },
      { status = 529, error = { type = "overloaded_error", message = "Overloaded" } },
      { sse_error = { type = "overloaded_error", message = "Overloaded" } },
      { content = { { type = "text", text = "a long answer that will be cut" } }, cut_after = 4 },
      text_answer("made it"),
    }, { "agent:coding say something" })
    local c = cards.find(out, "^%[main%] agent:coding")
    assert.matches("✓ done after 1 turn in", c, 1, true)
    assert.matches("made it$", c)
    assert.equal(5, #reqs)
    assert.is_true(core.now_ms() - t0 >= 1000, "retry-after was not waited for")
    assert.matches("agent.model_retry", err, 1, true)
  end)

  it("ends the run at a 401 with a card that says what to fix, never showing the key", function()
    local out, err, reqs = session({}, { "agent:coding hello" }, { env = { ANTHROPIC_API_KEY = "sk-ant-wrong-key-0123456789" } })
    local c = cards.find(out, "^%[main%] agent:coding")
    assert.matches("✗ model API error after 1 turn", c, 1, true)
    assert.matches("Anthropic rejected the API key (401 authentication_error", c, 1, true)
    assert.matches("set ANTHROPIC_API_KEY", c, 1, true)
    assert.equal(1, #reqs) -- never retried
    assert.not_matches("sk-ant-wrong-key-0123456789", out .. err .. transcript_text(), 1, true)
  end)

  it("without ANTHROPIC_API_KEY the card says so and how to set it", function()
    local out, _, reqs = session({}, { "agent:coding hello" }, { env = { ANTHROPIC_API_KEY = false } })
    local c = cards.find(out, "^%[main%] agent:coding")
    assert.matches("✗ not run — no model credential", c, 1, true)
    assert.matches("ANTHROPIC_API_KEY is not set", c, 1, true)
    assert.matches("export ANTHROPIC_API_KEY=", c, 1, true)
    assert.equal(0, #reqs)
    -- commands still run without a model
  end)

  it("offers a readonly agent no write tool, and refuses a write it asks for anyway", function()
    local out, _, reqs = session({
      tool("write_file", { path = "x.txt", content = "no" }),
      text_answer("reviewed"),
    }, { "agent:review look around" })
    assert.same({ "bash", "read_file", "glob", "grep", "list", "todo_write" }, model.tool_names(reqs[1]))
    local r = model.tool_results(reqs[2])[1]
    assert.is_true(r.is_error)
    assert.matches('there is no tool "write_file"', r.content, 1, true)
    assert.matches("✓ done after 2 turns", cards.find(out, "^%[main%] agent:review"), 1, true)
  end)

  it("runs one ask at a time per thread: a later ask waits for the run before it", function()
    local out, _, reqs = session({
      tool("bash", { command = "sleep 0.5" }), text_answer("first done"), text_answer("second done"),
    }, { "agent:coding first ask", "agent:coding second ask" })
    local asks = {}
    for i, r in ipairs(reqs) do asks[i] = model.ask_of(r.body.messages[1]) end
    -- the second ask continues the thread's conversation: its request starts with the first
    -- ask and ends with the second, after the first run's whole exchange (docs/record.md)
    assert.same({ "first ask", "first ask", "first ask" }, asks)
    local last = reqs[3].body.messages
    assert.equal("second ask", model.ask_of(last[#last]))
    assert.equal("first done", model.text_of(last[#last - 1]))
    assert.matches("first done$", cards.find(out, "> first ask"))
    assert.matches("second done$", cards.find(out, "> second ask"))
  end)

  it("runs an agent without a repository with no tools and its own prompt", function()
    local out, _, reqs = session({ text_answer("4.") }, { "agent:general what is 2+2?" })
    assert.is_nil(reqs[1].body.tools)
    assert.matches("no tools, no repository", reqs[1].body.system[1].text, 1, true)
    assert.matches("^%[main%] agent:general · local\n> what is 2%+2%?\n✓ done after 1 turn in [%d.]+s · [%d,]+ tokens in / 20 out · cache [%d,]+ read / [%d,]+ written · %$%d+%.%d%d\n4%.$",
      cards.find(out, "^%[main%] agent:general"))
  end)

  it("stop mid-stream drops the model's answer at once and ends the card as stopped", function()
    local out = session({
      { content = { { type = "text", text = "thinking for a long time" } }, hold_ms = 60000, touch = state .. "/streaming" },
    }, [[
      mkfifo in
      CONSOLE < in > out 2> err & pid=$!
      exec 3> in
      echo 'agent:coding think hard' >&3
      for i in $(seq 1200); do [ -f streaming ] && break; sleep 0.05; done
      # message_start is in the console's socket now; stop once the console has read it (its
      # connection to the stand-in has nothing left to receive), so the card counts its usage
      # however slowly a loaded machine schedules the console
      port=$(printf '%04X' "${ANTHROPIC_BASE_URL##*:}")
      unread() { awk -v p=":$port" 'substr($3, length($3) - 4) == p && $4 == "01" { split($5, q, ":"); if (q[2] != "00000000") n++ } END { print n + 0 }' /proc/net/tcp /proc/net/tcp6; }
      for i in $(seq 1200); do [ "$(unread)" = 0 ] && break; sleep 0.05; done
      start=$(date +%s%N)
      echo stop >&3
      for i in $(seq 1200); do grep -q 'stopped after' out && break; sleep 0.05; done
      echo "stop_ms=$(( ($(date +%s%N) - start) / 1000000 ))" >> out
      exec 3>&-
      wait $pid; echo "exit=$?" >> out
    ]])
    assert.matches("exit=0\n", out)
    assert.matches("■ stopped after 1 turn in [%d.]+s · [%d,]+ tokens in / 1 out[^\n]* — the model stream",
      cards.find(out, "^%[main%] agent:coding"))
    -- at once: the stream holds for 60 s, so a stop that waited for the answer would take that
    -- long; half of it is room for a loaded machine and still fails a stop that waits
    assert.is_true(tonumber(out:match("stop_ms=(%d+)")) < 30000, out)
  end)

  it("stop mid-command kills the command's process group at once", function()
    local out = session({
      tool("bash", { command = "sleep 60 & echo $! > " .. state .. "/bg; echo $$ > " .. state .. "/pid; wait", timeoutMs = 3000 }),
      text_answer("never reached"),
    }, [[
      mkfifo in
      CONSOLE < in > out 2> err & pid=$!
      exec 3> in
      echo 'agent:coding start a long command' >&3
      for i in $(seq 400); do [ -s bg ] && [ -s pid ] && break; sleep 0.05; done
      echo stop >&3
      for i in $(seq 400); do grep -q 'stopped after' out && break; sleep 0.05; done
      exec 3>&-
      wait $pid; echo "exit=$?" >> out
    ]], { policies = policy_dir{ timeouts = "bash.default_ms = 30 * second\nbash.max_ms = 60 * second\n" } })
    assert.matches("exit=0\n", out)
    assert.matches("■ stopped after 1 turn", cards.find(out, "^%[main%] agent:coding") or out, 1, true)
    local leader, bg = tonumber(files.read(state .. "/pid")), tonumber(files.read(state .. "/bg"))
    core.run(function() model.wait_for(function() return not procs.alive(leader) and not procs.alive(bg) end, 10000) end)
    assert.is_false(procs.alive(leader))
    assert.is_false(procs.alive(bg))
  end)

  it("refuses commands inside the run reserve, and ends the run when the API's wait outlasts it", function()
    local out, _, reqs = session({
      tool("bash", { command = "echo should-not-run" }),
      -- within model_api.retry.max_retry_after_ms, raised below (a longer one is not honoured, as in the SDKs)
      { status = 429, headers = { ["retry-after"] = "100" }, error = { type = "rate_limit_error", message = "later" } },
    }, { "agent:coding do it" }, { policies = policy_dir{ timeouts = "run.reserve_ms = 59900\n",
                                                          agents = "agents.coding.max_run_minutes = 1\nmodel_api.retry.max_retry_after_ms = 2 * minute\n" } })
    local r = model.tool_results(reqs[2])[1]
    assert.is_true(r.is_error)
    assert.matches("^exit 124: run budget exhausted", r.content)
    local c = cards.find(out, "^%[main%] agent:coding")
    assert.matches("⏱ run budget exhausted after 2 turns", c, 1, true)
    assert.matches("asked to wait 100s, longer than the run has left", c, 1, true)
  end)

  describe("on the sandbox backend (the scripted sandbox stand-in)", function()
    local sb
    after_each(function()
      if sb then core.run(function() sb.stop() end) end
      sb = nil
    end)

    local function sandbox_session(answers, sandbox_answers, lines)
      core.run(function()
        sb = sandbox.start_standin()
        sb:script(sandbox_answers)
      end)
      return session(answers, lines, { args = "--backend sandbox --sandbox-url " .. sb.url,
                                       env = { SANDBOX_TOKEN = "spec-sandbox-token" } })
    end

    it("tells the model the fleet is busy, notes ⏳ on the card, and never counts it as infra", function()
      local busy = { status = 503, body = { error = "fleet-busy: no free sandbox", reason = "fleet-busy" } }
      local ok = { status = 200, body = { stdout = "ran\n", stderr = "", exitCode = 0, durationMs = 5 } }
      local out, _, reqs = sandbox_session({
        tool("bash", { command = "echo 1" }), tool("bash", { command = "echo 2" }),
        tool("bash", { command = "echo 3" }), text_answer("done despite the queue"),
      }, { busy, busy, busy, busy, busy, busy, ok }, { "agent:coding build" })
      local r = model.tool_results(reqs[2])[1]
      assert.matches("^⏳ Sandbox fleet busy", r.content)
      assert.is_nil(r.is_error)
      local c = cards.find(out, "^%[main%] agent:coding")
      assert.matches("note: ⏳ turn 1: the sandbox fleet was busy", c, 1, true)
      assert.matches("✓ done after 4 turns", c, 1, true)
    end)

    it("stops at once after consecutive infra failures, naming the sandbox failure", function()
      local boom = { status = 500, body = { error = "Internal Server Error" } }
      -- the run's facts are gathered first (agent/facts.lua), then the sandbox fails
      local facts = { status = 200, body = { stdout = "@@os Debian\n", stderr = "", exitCode = 0, durationMs = 5 } }
      local out, _, reqs = sandbox_session({
        tool("bash", { command = "echo 1" }), tool("bash", { command = "echo 2" }),
        tool("bash", { command = "echo 3" }), text_answer("unreachable"),
      }, { facts, boom, boom, boom, boom }, { "agent:coding build" })
      assert.equal(2, #reqs) -- the second failure ended the run: no third model turn
      assert.is_true(model.tool_results(reqs[2])[1].is_error)
      local c = cards.find(out, "^%[main%] agent:coding")
      assert.matches("✗ sandbox failure after 2 turns", c, 1, true)
      assert.matches("failed 2 times in a row", c, 1, true)
    end)
  end)
end)
