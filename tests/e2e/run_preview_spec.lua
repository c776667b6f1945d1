-- Black-box: an agent run that serves what it built (issue 39 item 3; docs/agent.md
-- "Background processes"). The real `switchboard slack` against the Slack stand-in and the
-- Messages API stand-in (a scripted model), its commands in the real walled sandboxd: the model
-- writes a page, starts Python's http.server with bash's run_in_background, exposes its port,
-- screenshots the preview URL, reads the server's log (Chromium's request is in it) and kills
-- it, leaving a second process running. The PNG reaches the Slack thread and the run page; the
-- card has a Preview button with the URL and says which process still runs; the preview URL
-- answers no more once the server is killed; after the awake limit ends the one left running
-- and the instance sleeps, the thread's next card says so.
local core = require("switchboard.core")
local cjson = require("cjson")
local S = require("support.sandbox")
local SL = require("support.slack")
local model = require("support.model")
local tmp = require("support.tmp")

local UID_BASE = require("support.walls").private_uid_base(64)

local function policy_dir()
  return S.walled_policy_dir(UID_BASE, "sandbox.sleep_after = \"5s\"\nsandbox.process_awake_ms = 40 * second\n")
end

local describe_walls = require("support.walls").probe(policy_dir(),
  { describe = describe, it = it, pending = pending })

local function use(name, input) return { type = "tool_use", name = name, input = input } end

local function text_of(result)
  if type(result.content) == "string" then return result.content end
  local out = {}
  for _, b in ipairs(result.content or {}) do if b.type == "text" then out[#out + 1] = b.text end end
  return table.concat(out, "\n")
end

-- The tool_result of the first call with this name: in the request right after the answer
-- that made the call (its last message answers the one before it).
local function result_of(requests, name)
  for _, req in ipairs(requests) do
    local answered = req.body.messages[#req.body.messages - 1]
    local calls = answered and type(answered.content) == "table" and answered.content or {}
    local ids = {}
    for _, b in ipairs(calls) do if b.type == "tool_use" and b.name == name then ids[b.id] = true end end
    for _, r in ipairs(model.tool_results(req)) do
      if ids[r.tool_use_id] then return r end
    end
  end
end

local PAGE = "<html><body style='background:#fff'><h1 style='color:#c00'>Served from the background</h1></body></html>\n"

describe_walls("a run that serves what it built", function()
  after_each(function()
    S.cleanup_servers()
    tmp.remove_all()
    S.cleanup()
  end)

  it("starts a server in the background, exposes it, screenshots the preview URL, reads its log and kills it", function()
    local pol = policy_dir()
    local T = "1700000900.000100"
    local r = {}
    core.run(function()
      local h = S.start_sandboxd{ policies = pol }
      r.sandboxd = h
      -- previews under a base URL of their own, as a deployment names one (people reach
      -- previews there, not at SANDBOX_URL: docs/slack.md). localhost: the same server.
      local f = assert(io.open(pol .. "/timeouts.lua", "a"))
      f:write(("\nsandbox.ports_base_url = \"http://localhost:%d\"\n"):format(h.port))
      f:close()
      h:stop("HUP")
      assert(S.wait_for(function() return h.log():find("policy.reloaded", 1, true) end, 60000), h.log())
      local m = model.start()
      m:script{
        { content = { use("write_file", { path = "site/index.html", content = PAGE }) } },
        { content = { use("bash", { command = "cd site && exec python3 -u -m http.server 8765 --bind 127.0.0.1",
                                    run_in_background = true }) } },
        { content = { use("expose_port", { port = 8765 }) } },
        { content = { use("screenshot", { url = "{{from_results:(http://\\S+/ports/[0-9a-f]+/)}}", width = 640, height = 400 }) } },
        { content = { use("process_logs", { id = "{{from_results:started background process (p[0-9a-f]+) \\(pid [^)]*\\): cd site}}" }) } },
        { content = { use("bash", { command = "exec sleep 600", run_in_background = true }) } },
        { content = { use("process_kill", { id = "{{from_results:started background process (p[0-9a-f]+) \\(pid [^)]*\\): cd site}}" }) } },
        { content = { { type = "text", text = "The page is served; see the preview." } } },
      }
      local st = SL.standin()
      local bot = SL.bot(st, { walled = true, state_dir = tmp.dir("slack"), policies = pol,
        args = { "--listen", "127.0.0.1:0" }, env = {
          ANTHROPIC_BASE_URL = m.url, ANTHROPIC_API_KEY = m.key, SANDBOX_URL = h.url, SANDBOX_TOKEN = S.TOKEN,
          GH_TOKEN = "specs-own-token", SLACK_SIGNING_SECRET = SL.SIGNING_SECRET } })
      st:envelope("events_api", SL.mention{ ts = T, text = "agent:coding make a page, serve it and show it to me" })
      r.card = SL.final_card(st, T, 300000)
      r.upload = SL.upload_titled(st, "Screenshot", 60000)
      r.requests = m:requests()
      -- the killed server's preview URL reaches nothing any more
      r.preview = r.card:match("%[Preview%] (http://%S+)")
      if r.preview then r.after_kill = core.http.request{ url = r.preview, deadline_ms = 30000 } end
      local page = r.card:match("%[View run%] (http://[^%s>|]+)")
      if page then
        page = page:gsub("^http://[^/]+", "http://127.0.0.1:" .. bot.events_port)
        r.page_status, _, r.page = core.http.request{ method = "GET", url = page, deadline_ms = 10000 }
      end
      -- the process left running ends at the awake limit (40 s here), then the instance sleeps;
      -- the thread's next card says what became of it
      r.slept = S.wait_for(function() return h.log():find("sandboxd.instance_slept", 1, true) end, 180000)
      st:envelope("events_api", SL.mention{ ts = "1700000901.000100", thread_ts = T, text = "run `true`" })
      r.next_card = SL.final_card(st, T, 120000, "$ true")
      bot:signal("TERM")
      r.log = bot:wait() and bot.err
      st:close()
      m:stop()
      h:stop()
      h:wait()
    end)
    local started = text_of(assert(result_of(r.requests, "bash"), "no bash result"))
    assert.matches("^started background process p%x+ %(pid %d+%): cd site && exec python3", started)
    assert.matches("after 1%.0 s it is running%.", started)
    local exposed = text_of(assert(result_of(r.requests, "expose_port")))
    local url = exposed:match("port 8765 is exposed at (http://localhost:%d+/ports/%x+/)")
    assert.is_not_nil(url, exposed)
    -- the screenshot of the preview URL: taken at the port inside the sandbox, an image for the model
    local shot = assert(result_of(r.requests, "screenshot"))
    assert.is_nil(shot.is_error, cjson.encode(shot))
    assert.equal("image", shot.content[1].type)
    local png = core.crypto.base64_decode(shot.content[1].source.data)
    assert.equal("\137PNG\r\n\26\n", png:sub(1, 8))
    assert.matches("screenshot of " .. url .. ": 640×400 pixels", shot.content[2].text, 1, true)
    assert.matches("rendered inside the sandbox at http://127.0.0.1:8765/", shot.content[2].text, 1, true)
    -- Chromium's request is in the server's log
    local logs = text_of(assert(result_of(r.requests, "process_logs")))
    assert.matches("^process p%x+ %(cd site && exec python3[^)]*%): running\n", logs)
    assert.matches('"GET / HTTP/1.1" 200', logs, 1, true)
    local killed = text_of(assert(result_of(r.requests, "process_kill")))
    assert.matches("^process p%x+ is killed: its process group was ended$", killed)
    -- the same PNG in the Slack thread and on the run page
    assert.equal(T, r.upload.thread_ts)
    assert.equal(png, core.crypto.base64_decode(r.upload.bytes_b64))
    assert.equal(200, r.page_status)
    assert.truthy(r.page:find('src="data:image/png;base64,' .. core.crypto.base64_encode(png) .. '"', 1, true))
    -- the card: a Preview button with the URL, the process still running said once
    assert.equal(url, r.preview, r.card)
    assert.equal(502, r.after_kill)
    assert.matches("▶ running in the background: `exec sleep 600` %(p%x+%) — it ends when the thread's sandbox sleeps", r.card)
    assert.is_nil(r.card:find("cd site", 1, true), r.card) -- the killed one is not a note
    -- after the sleep: the next card of the thread says it ended
    assert.truthy(r.slept, r.sandboxd.log():sub(-2000))
    assert.matches("⏹ background process `exec sleep 600` %(p%x+%) ended at the awake limit", r.next_card)
    assert.is_nil(r.next_card:find("▶ running", 1, true), r.next_card)
    print(("\n%s; %s"):format(started:match("after [%d.]+ s it is running"), shot.content[2].text))
  end)
end)
