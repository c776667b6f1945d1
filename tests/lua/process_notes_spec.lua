-- The card's lines about a thread's background processes (exec/process_notes.lua): each said
-- once — running at an ask's end, then how it ended (the sandbox's sleep, the awake limit, its
-- own exit) — one killed by process_kill not at all; and the card's Preview button
-- (fronts/slack/blocks.lua) while the run works and at its end.
local notes = require("switchboard.exec.process_notes")
local run_card = require("switchboard.dispatch.run_card")
local blocks = require("switchboard.fronts.slack.blocks")

describe("the background processes' card lines", function()
  it("says each process once: running, then how it ended; a killed one is not said", function()
    local holder, listed = {}, {}
    local function list() return listed end
    assert.same({}, notes.take(holder, list)) -- none started: nothing asked
    notes.started(holder, { id = "p1", command = "npm run dev\nmore" })
    notes.started(holder, { id = "p2", command = "python3 -m http.server" })
    notes.started(holder, { id = "p3", command = "make watch" })
    listed = { { id = "p1", status = "running" }, { id = "p2", status = "running" }, { id = "p3", status = "exited", exitCode = 2 } }
    assert.same({
      "▶ running in the background: `npm run dev` (p1) — it ends when the thread's sandbox sleeps",
      "▶ running in the background: `python3 -m http.server` (p2) — it ends when the thread's sandbox sleeps",
      "⏹ background process `make watch` (p3) exited (code 2)",
    }, notes.take(holder, list))
    assert.same({}, notes.take(holder, list)) -- said once
    listed = { { id = "p1", status = "killed", reason = "instance-slept" }, { id = "p2", status = "killed" } }
    assert.same({ "⏹ background process `npm run dev` (p1) ended when the thread's sandbox slept" }, notes.take(holder, list))
    assert.same({}, notes.take(holder, list))
    assert.is_nil(next(holder.background))
  end)

  it("a sandboxd that does not answer: nothing now, said at the next ask", function()
    local holder = {}
    notes.started(holder, { id = "p9", command = "sleep 600" })
    assert.same({}, notes.take(holder, function() return nil, "unreachable" end))
    assert.same({ "⏹ background process `sleep 600` (p9) ended at the awake limit (sandbox.process_awake_ms)" },
      notes.take(holder, function() return { { id = "p9", status = "killed", reason = "awake-limit" } } end))
  end)

  it("the card has a Preview button with the URL while it works and at its end", function()
    local c = run_card.new{ thread = "t", agent = "coding", ask = "serve it" }
    c.state, c.turns = "running", 1
    c:set_preview("https://preview.example/ports/abc/")
    local function buttons(rendered)
      local out = {}
      for _, b in ipairs(rendered.blocks) do
        for _, e in ipairs(b.elements or {}) do if e.type == "button" then out[#out + 1] = e.text.text .. " " .. tostring(e.url) end end
      end
      return out
    end
    assert.same({ "Stop nil", "Preview https://preview.example/ports/abc/" }, buttons(blocks.render(c, { thread = "t", now_ms = 0 })))
    c:ended("done", 10, "served", nil)
    assert.same({ "Preview https://preview.example/ports/abc/" }, buttons(blocks.render(c, { thread = "t", now_ms = 0 })))
    assert.matches("\npreview: https://preview.example/ports/abc/\n", c:header(4000), 1, true)
  end)
end)
