-- The result text (docs/contract.md#failure-result), deadline kill and clip lines
-- (#timeout-exit-124, #timeout-run-clip).
local P = require("support.policies")
local render = require("switchboard.shell.render")
local errors = require("switchboard.exec.errors")
local budget = require("switchboard.shell.budget")

describe("render.text", function()
  local snap
  setup(function() snap = P.shipped() end)

  it("exit 0 with output is the output", function()
    assert.equal("hello", render.text(snap, { exit_code = 0, stdout = "hello\n", stderr = "" }))
    assert.equal("out\nerr", render.text(snap, { exit_code = 0, stdout = "out", stderr = "err\n" }))
  end)

  it("exit 0 with no output is (no output)", function()
    assert.equal("(no output)", render.text(snap, { exit_code = 0, stdout = "", stderr = "" }))
    assert.equal("(no output)", render.text(snap, { exit = 0 }))
  end)

  it("a nonzero exit is 'exit N:' followed by the output; a silent 127 is a plain exit 127:", function()
    assert.equal("exit 1: boom", render.text(snap, { exit_code = 1, stdout = "", stderr = "boom\n" }))
    assert.equal("exit 127:", render.text(snap, { exit_code = 127, stdout = "", stderr = "" }))
  end)

  it("a deadline kill is exit 124 with a line naming the limit, the timeoutMs knob and its max", function()
    local text = render.text(snap, { exit_code = 124, timed_out = true, stdout = "partial\n", limit_ms = 280000, where = "sandbox" })
    assert.equal("exit 124: partial\ncommand timed out in the sandbox after 280s (the command's limit, 280000 ms); if it needs longer, pass a larger timeoutMs (up to 1200000)", text)
    -- the engine's 137/143 for our own kill is reported as 124 too
    assert.matches("^exit 124: command timed out", render.text(snap, { exit = 137, timed_out = true, limit_ms = 1000 }))
  end)

  it("an ordinary nonzero exit never gets the 124 wording", function()
    local text = render.text(snap, { exit_code = 2, stdout = "", stderr = "usage" })
    assert.is_nil(text:find("timed out", 1, true))
    assert.is_nil(text:find("timeoutMs", 1, true))
  end)

  it("an abort is a stop line, never 124", function()
    local text = render.text(snap, { exit_code = 137, aborted = true, timed_out = true, stdout = "so far" })
    assert.equal("exit 137: so far\n[stopped: hard stop — the command was killed]", text)
    text = render.text(snap, { exit_code = 124, aborted = true, abort_reason = "operator stop" })
    assert.equal("[stopped: operator stop — the command was killed]", text)
    assert.is_nil(text:find("124", 1, true))
  end)

  it("truncation is marked per stream", function()
    local text = render.text(snap, { exit_code = 0, stdout = "aaa", truncated = { stdout = true, stderr = false } })
    assert.equal("aaa\n[output truncated: stdout passed 1048576 bytes; the rest was dropped]", text)
    text = render.text(snap, { exit_code = 3, stdout = "", stderr = "e", truncated = { stderr = true }, max_output = 10 })
    assert.equal("exit 3: e\n[output truncated: stderr passed 10 bytes; the rest was dropped]", text)
  end)

  it("a clipped budget's line comes last", function()
    local plan = budget.within_run(snap, nil, 3 * 60 * 1000)
    local text = render.text(snap, { exit_code = 124, timed_out = true, limit_ms = plan.timeout_ms, where = "local shell", clip_line = plan.clip_line })
    assert.matches("\n%[timeout clipped to 120s[^\n]*$", text)
  end)

  it("a refused command reads as exit 124: run budget exhausted", function()
    local _, why = budget.within_run(snap, nil, 10 * 1000)
    assert.matches("^exit 124: run budget exhausted", render.refused(errors.refused(why, 124)))
  end)

  it("result() fills the text field", function()
    local r = render.result(snap, { exit_code = 0, stdout = "x" })
    assert.equal("x", r.text)
  end)
end)
