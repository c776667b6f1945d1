-- The status card (lua/switchboard/dispatch/card.lua): what it says in each state, and how a
-- long output is cut to the card limit.
local card = require("switchboard.dispatch.card")
local errors = require("switchboard.exec.errors")

local MAX = 4000

local function new()
  return card.new{ thread = "main", user = "ana", agent = "coding", command = "npm test" }
end

local function numbered(n)
  local lines = {}
  for i = 1, n do lines[i] = ("line %05d of the output"):format(i) end
  return table.concat(lines, "\n")
end

describe("dispatch card", function()
  it("shows agent, backend, repository, the factory's note and the command", function()
    local c = card.new{ thread = "t1", agent = "review", command = "npm test", repo = "acme/api" }
    assert.matches("\n… queued behind this thread's running ask — its clock starts when it runs$", c:render{ max_chars = MAX })
    c.behind = "`make` (running)"
    assert.matches("\n… queued behind `make` %(running%) — its clock starts when it runs$", c:render{ max_chars = MAX })
    c:provisioning()
    c:provisioned("sandbox", "resident unavailable (not provided by this build) — using fresh sandbox")
    local text = c:render{ max_chars = MAX, now_ms = 0 }
    assert.equal(table.concat({
      "[t1] agent:review · sandbox · acme/api",
      "note: resident unavailable (not provided by this build) — using fresh sandbox",
      "$ npm test",
      "… provisioning",
    }, "\n"), text)
  end)

  it("shows the elapsed time in whole seconds while running", function()
    local c = new()
    c:provisioned("local")
    c:running(1000)
    assert.matches("… running 0s$", c:render{ max_chars = MAX, now_ms = 1999 })
    assert.matches("… running 1s$", c:render{ max_chars = MAX, now_ms = 2000 })
    assert.matches("… running 1m 05s$", c:render{ max_chars = MAX, now_ms = 66000 })
    assert.equal("[main] coding running 1s", c:summary(2500))
  end)

  it("ends with the exit status and the output, without the text's own exit prefix", function()
    local c = new()
    c:provisioned("local")
    c:running(0)
    c:finished({ exit_code = 2, text = "exit 2: boom" }, 400)
    assert.equal("[main] agent:coding · local\n$ npm test\n✗ exit 2 after 0.4s\nboom",
      c:render{ max_chars = MAX, now_ms = 400 })
    local ok = new()
    ok:running(0)
    ok:finished({ exit_code = 0, text = "hi" }, 3200)
    assert.matches("\n✓ exit 0 after 3.2s\nhi$", ok:render{ max_chars = MAX })
    local t = new()
    t:running(0)
    t:finished({ exit_code = 124, timed_out = true, text = "exit 124: command timed out" }, 300000)
    assert.matches("\n⏱ exit 124 after 5m 00s %(timed out%)\ncommand timed out$", t:render{ max_chars = MAX })
  end)

  it("says stopped, never an exit, after a hard stop", function()
    local c = new()
    c:running(0)
    c:finished({ exit_code = 137, aborted = true,
                 text = "exit 137: [stopped: stop asked in this thread — the command was killed]" }, 2000)
    local text = c:render{ max_chars = MAX }
    assert.matches("\n■ stopped after 2.0s — the command's process group was killed", text)
    assert.not_matches("✗ exit", text)
    assert.equal("stopped", c.state)
  end)

  it("reads a capacity error as ⏳ Sandbox fleet busy, an infra error as a sandbox failure", function()
    local busy = new()
    busy:provisioned("sandbox")
    busy:running(0)
    busy:failed(errors.capacity("sandbox fleet busy — no free per-thread sandbox after waiting 300s"), 300000, errors)
    local text = busy:render{ max_chars = MAX }
    assert.matches("\n⏳ Sandbox fleet busy — no free per%-thread sandbox after waiting 300s$", text)
    assert.not_matches("exit", text)

    local infra = new()
    infra:provisioned("sandbox")
    infra:running(0)
    infra:failed(errors.infra("sandbox worker /exec gave no answer within 330s"), 330000, errors)
    text = infra:render{ max_chars = MAX }
    assert.matches("\n✗ sandbox failure after 5m 30s — infrastructure, not the command's exit status\n"
      .. "sandbox worker /exec gave no answer within 330s$", text)
    assert.not_matches("exit 127", text)
  end)

  it("shows a tool error (the null executor's) and a refusal as not run", function()
    local c = new()
    c:provisioned("local")
    c:running(0)
    c:failed(errors.tool("bash is not available: agent general declared no repository"), 0, errors)
    assert.matches("\n✗ not run\nbash is not available: agent general declared no repository$",
      c:render{ max_chars = MAX })
    local r = new()
    r:failed(errors.refused("run budget exhausted"), 0, errors)
    assert.matches("\n✗ not run\nexit 124: run budget exhausted$", r:render{ max_chars = MAX })
  end)

  it("cuts a long output to the limit, keeps head and tail at line ends, names the file", function()
    local body = numbered(5000)
    local c = new()
    c:provisioned("local")
    c:running(0)
    c:finished({ exit_code = 1, text = "exit 1: " .. body }, 1000)
    assert.is_true(c:overflows(MAX))
    c.full_path = "/state/outputs/main-abc/20260101T000000Z-1.txt"
    local text = c:render{ max_chars = MAX }
    assert.is_true(#text <= MAX, "card is " .. #text .. " bytes")
    assert.is_true(#text > MAX - 200, "card wastes room: " .. #text .. " bytes")
    assert.matches("\n✗ exit 1 after 1.0s\nline 00001 of the output\n", text)
    assert.matches("\nline 05000 of the output$", text)
    local marker = text:match("\n(… %[[^\n]*%] …)\n")
    assert.truthy(marker, "no marker line")
    assert.matches("lines %(.+ bytes%) cut here — the whole output is in "
      .. "/state/outputs/main%-abc/20260101T000000Z%-1%.txt", marker)
    -- every kept line is whole, and the numbers add up
    for line in text:gmatch("[^\n]+") do
      if line:find("^line") then assert.matches("^line %d%d%d%d%d of the output$", line) end
    end
    local head_last = tonumber(text:match("line (%d+) of the output\n… %["))
    local tail_first = tonumber(text:match("%] …\nline (%d+) of the output"))
    local cut_lines = tonumber((marker:match("^… %[([%d,]+) lines"):gsub(",", "")))
    assert.equal(tail_first - head_last - 1, cut_lines)
    assert.is_true(tail_first - head_last > 1)
    -- the tail gets more room than the head: errors are usually at the end
    assert.is_true(5000 - tail_first > head_last)
  end)

  it("says so when the whole output could not be kept", function()
    local c = new()
    c:running(0)
    c:finished({ exit_code = 0, text = numbered(2000) }, 1)
    c.full_error = "disk full"
    local text = c:render{ max_chars = MAX }
    assert.is_true(#text <= MAX)
    assert.matches("cut here — the whole output could not be kept: disk full%] …", text)
  end)

  it("never splits a UTF-8 character, even in one long line", function()
    local body = ("ü€😀"):rep(3000) -- 9 bytes a group, no newline
    local cut, was_cut = card.cut(body, 1000, "/f")
    assert.is_true(was_cut)
    assert.is_true(#cut <= 1000)
    assert.truthy(utf8.len(cut), "the cut text is not valid UTF-8")
    local c = new()
    c:running(0)
    c:finished({ exit_code = 0, text = body }, 1)
    c.full_path = "/f"
    local text = c:render{ max_chars = MAX }
    assert.is_true(#text <= MAX)
    assert.truthy(utf8.len(text))
  end)

  it("does not cut what fits, and keeps a huge command and note inside the limit", function()
    local c = new()
    c:running(0)
    c:finished({ exit_code = 0, text = "short" }, 1)
    assert.is_false(c:overflows(MAX))
    assert.equal("short", select(1, card.cut("short", 10)))
    local big = card.new{ thread = "main", agent = "coding", command = ("x"):rep(20000) }
    big:provisioned("local", ("n"):rep(20000))
    big:running(0)
    big:finished({ exit_code = 0, text = numbered(3000) }, 1)
    big.full_path = "/f"
    local text = big:render{ max_chars = MAX }
    assert.is_true(#text <= MAX)
    assert.matches("\n✓ exit 0", text)
    assert.matches("line 03000 of the output$", text)
  end)

  it("shows a card that never ran", function()
    local c = new()
    c:cancelled("switchboard is shutting down", 0)
    assert.matches("\n■ not run — switchboard is shutting down$", c:render{ max_chars = MAX })
    local u = new()
    u:unprovisioned("agent coding runs on the sandbox backend, but SANDBOX_URL is not set", 0)
    assert.matches("\n✗ could not provision agent coding\nagent coding runs on the sandbox backend, "
      .. "but SANDBOX_URL is not set$", u:render{ max_chars = MAX })
  end)
end)

describe("dispatch card: notes from exec/stack.lua", function()
  it("shows every line of a list under the header, in order (the factory's, then the walls line)", function()
    local c = card.new{ thread = "t1", agent = "coding", command = "ls" }
    c:provisioning()
    c:provisioned("local", { "resident unreachable — using fresh local workspace",
      "local executor: unwalled — commands run as this host's user (policies/isolation.lua local_walls)" })
    assert.equal(table.concat({
      "[t1] agent:coding · local",
      "note: resident unreachable — using fresh local workspace",
      "note: local executor: unwalled — commands run as this host's user (policies/isolation.lua local_walls)",
      "$ ls",
      "… provisioning",
    }, "\n"), c:render{ max_chars = MAX, now_ms = 0 })
  end)
end)
