-- A thread that remembers (docs/record.md), black-box: `switchboard slack` against the Slack
-- stand-in (tests/support/slack_standin.py), the Messages API stand-in
-- (tests/support/model_standin.py), GitHub's App and pull-request routes
-- (tests/support/github_standin.lua) and git's smart HTTP (tests/support/git_standin.py).
--   * three asks in one thread: the third request carries the first two asks and answers,
--     with a restart of the bot and the workspace removed before the third; every push is a
--     fast-forward of the thread's branch and the pull request's body keeps the first section
--   * a follow-up queued behind a long run gets its whole budget
--   * SIGKILL of the bot mid-run: nothing acknowledged is lost and the thread continues
local core = require("switchboard.core")
local async = require("support.async")
local tmp = require("support.tmp")
local P = require("support.policies")
local SL = require("support.slack")
local model = require("support.model")
local files = require("support.files")
local standin = require("support.github_standin")

local function sh(cmd)
  local ok = os.execute(cmd)
  assert(ok, "failed: " .. cmd)
end

local function capture(cmd)
  local p = io.popen(cmd .. " 2>&1")
  local s = p:read("a")
  p:close()
  return s
end

local function finals(st, thread_ts)
  local out = {}
  for _, c in ipairs(st:cards(thread_ts)) do if SL.is_final(c) then out[#out + 1] = c end end
  return out
end

local function wait_finals(st, thread_ts, n, bound_ms)
  return SL.wait(function()
    local f = finals(st, thread_ts)
    if #f >= n then return f end
  end, n .. " final cards in thread " .. thread_ts, bound_ms or 120000)
end

-- Every text of a request's messages, in order ("user: …", "assistant: …").
local function texts(request)
  local out = {}
  for _, m in ipairs(request.body.messages) do
    if type(m.content) == "string" then
      out[#out + 1] = m.role .. ": " .. m.content
    else
      for _, b in ipairs(m.content) do
        if b.type == "text" then out[#out + 1] = m.role .. ": " .. b.text end
      end
    end
  end
  return table.concat(out, "\n")
end

local function bash(cmd) return { content = { { type = "tool_use", name = "bash", input = { command = cmd } } } } end
local function say(text) return { content = { { type = "text", text = text } } } end

describe("a thread that remembers", function()
  local state, gitport, st, bot, m, w, pol

  local function start_bot(policies)
    bot = SL.bot(st, { state_dir = state .. "/st", policies = policies or pol, args = { "--health-listen", "127.0.0.1:0" }, env = {
      ANTHROPIC_BASE_URL = m.url, ANTHROPIC_API_KEY = m.key, GITHUB_APP_ID = "12345",
      GITHUB_APP_PRIVATE_KEY = state .. "/app.pem", GITHUB_API_URL = w.gh.api_url, GH_TOKEN = false,
      HOME = state,
    } })
    return bot
  end

  local function stop_bot()
    bot:signal("TERM")
    assert.equal(0, bot:wait().exit)
  end

  before_each(async(function()
    state = tmp.dir("memory")
    sh(("cd %s && mkdir -p repos/acme gitd && git init -q --bare repos/acme/api.git"
      .. " && git init -q src && cd src && printf 'zero\\n' > README.md"
      .. " && git add . && git -c user.email=s@x -c user.name=s commit -qm init"
      .. " && git push -q ../repos/acme/api.git HEAD:refs/heads/main"
      .. " && git -C ../repos/acme/api.git symbolic-ref HEAD refs/heads/main"):format(state))
    os.execute(("env -u LD_PRELOAD /usr/bin/python3 tests/support/git_standin.py --dir %s/gitd --root %s/repos --tokens-file %s/tokens >%s/gitd/out 2>&1 &")
      :format(state, state, state, state))
    gitport = model.wait_for(function() return files.read(state .. "/gitd/port") end, 60000)
    assert(gitport, "the git stand-in did not start")
    pol = P.dir{
      github = function(src) return src .. '\nclone_url = "http://127.0.0.1:' .. gitport .. '/{repo}.git"\n' end,
    }
    w = standin.world{ policy = function() return P.shipped() end, real_clock = true,
                       tokens_file = state .. "/tokens", repos_root = state .. "/repos" }
    P.write(state .. "/app.pem", w.priv)
    os.execute("chmod 600 '" .. state .. "/app.pem'")
    m = model.start()
    st = SL.standin()
  end))

  after_each(async(function()
    SL.kill_bot(bot)
    bot = nil
    if m then m.stop() end
    if w then w.close() end
    st:close()
    local pid = files.read(state .. "/gitd/pid")
    if pid then os.execute("kill -9 " .. pid .. " 2>/dev/null") end
    local orphan = files.read(state .. "/orphan.pid")
    if orphan then os.execute("kill -9 " .. orphan:match("%d+") .. " 2>/dev/null") end
    tmp.remove_all()
    P.cleanup()
  end))

  local function remote(args)
    return capture(("git --git-dir=%s/repos/acme/api.git %s"):format(state, args))
  end

  it("continues the conversation, the branch and the pull request across a restart and a lost workspace", async(function()
    local two_calls = { content = {
      { type = "text", text = "Looking first." },
      { type = "tool_use", name = "bash", input = { command = "cat README.md; echo <b>not-bold</b>" } },
      { type = "tool_use", name = "read_file", input = { path = "README.md" } },
    } }
    m:script{
      two_calls, bash("seq 1 3000"),
      bash("echo one >> README.md"), say("Added one."),
      bash("echo two >> README.md"), say("Added two."),
      bash("echo three >> README.md"), say("Added three."),
    }
    start_bot()
    local T = "1700000100.000100"
    st:envelope("events_api", SL.mention{ ts = T, text = "agent:coding add a line one to README.md in acme/api" })
    local f1 = wait_finals(st, T, 1)
    assert.matches("pull request #1 opened", SL.card_text(f1[1]), 1, true)
    st:envelope("events_api", SL.mention{ ts = "1700000100.000200", thread_ts = T, text = "also add a line two" })
    local f2 = wait_finals(st, T, 2)
    assert.matches("pull request #1 updated", SL.card_text(f2[2]), 1, true)

    -- (b) a restart between the second and the third ask; (d) the workspace is gone too
    stop_bot()
    sh(("rm -rf %s/st/workspaces/*"):format(state))
    start_bot()
    st:envelope("events_api", SL.mention{ ts = "1700000100.000300", thread_ts = T, text = "also add a line three" })
    local f3 = wait_finals(st, T, 3)
    local card3 = SL.card_text(f3[3])
    assert.matches("pull request #1 updated", card3, 1, true)
    assert.matches("on the thread's branch switchboard/", card3, 1, true)

    -- (a) the third run's first request carries the first two asks and their answers, in order
    local reqs = m:requests()
    assert.equal(8, #reqs)
    local said = texts(reqs[7])
    local want = { "user: add a line one to README.md in acme/api", "assistant: Added one.",
                   "user: also add a line two", "assistant: Added two.", "user: also add a line three" }
    local pos = 0
    for _, line in ipairs(want) do
      local at = said:find(line, pos + 1, true)
      assert.is_not_nil(at, ("missing or out of order: %q in\n%s"):format(line, said))
      pos = at
    end
    -- the repository is the thread's after the restart: the system prompt names it
    -- (the system prompt is text blocks, the last with a cache breakpoint: issue 24)
    assert.matches("acme/api", model.system_text(reqs[7].body), 1, true)

    -- (c)(d) one branch, three commits in a line on top of main; the PR's body kept the first section
    local branch = card3:match("branch (switchboard/[%w%-]+)")
    assert.is_not_nil(branch, card3)
    local log = remote("log --format=%s " .. branch)
    assert.equal(4, select(2, log:gsub("\n", "")), log)
    assert.equal("zero\none\ntwo\nthree\n", remote("show " .. branch .. ":README.md"))
    local prs = w.gh.pulls["acme/api"]
    assert.equal(1, #prs)
    local body = prs[1].body
    local first = body:find("add a line one", 1, true)
    local third = body:find("also add a line three", 1, true)
    assert.is_not_nil(first, body)
    assert.is_not_nil(third, body)
    assert.is_true(first < third)

    -- (h) the first run's page (the longest run here: four tool calls, one output of 14 kB)
    -- in headless Chromium: every tool call with its input and output; a wrong token is 404
    -- (Chromium's own bound, 300 s: on a loaded machine — load average 90 — a dump took over 120)
    local url = SL.card_text(f1[1]):match("%[View run%] (http://[^%s>|]+)")
    assert.is_not_nil(url, SL.card_text(f1[1]))
    -- the bot restarted on another port since (a deployment sets record.pages.base_url)
    url = url:gsub("^http://[^/]+", "http://127.0.0.1:" .. bot.health_port)
    local p = io.popen(("env -u LD_PRELOAD timeout 300 chromium --headless --no-sandbox --disable-gpu --dump-dom '%s' 2>/dev/null"):format(url))
    local dom = p:read("a")
    p:close()
    for _, want_text in ipairs({ "add a line one to README.md in acme/api", "Looking first.",
        "cat README.md; echo &lt;b&gt;not-bold&lt;/b&gt;", "&lt;b&gt;not-bold&lt;/b&gt;", "read_file",
        "seq 1 3000", "2999\n3000", "echo one &gt;&gt; README.md", "Added one.", "pull request #1",
        "<dt>cost</dt><dd>$", "<dt>prompt cache</dt><dd>", "<summary>thinking" }) do
      local plain = want_text:gsub("\\n", "\n")
      assert.is_not_nil(dom:find(plain, 1, true), ("the page lacks %q:\n%s"):format(plain, dom:sub(1, 3000)))
    end
    local _, tool_divs = dom:gsub('class="tool', "")
    assert.equal(4, tool_divs)
    assert.is_nil(dom:find("<b>not-bold</b>", 1, true), "the page did not escape a command's output")
    sh(("env -u LD_PRELOAD timeout 300 chromium --headless --no-sandbox --disable-gpu --hide-scrollbars --window-size=390,2400 "
      .. "--screenshot=%s/run-page.png '%s' >/dev/null 2>&1"):format(state, url))
    assert.is_true(#(files.read(state .. "/run-page.png") or "") > 1000, "no screenshot")
    if os.getenv("SB_KEEP_SCREENSHOT") then sh(("cp %s/run-page.png %s"):format(state, os.getenv("SB_KEEP_SCREENSHOT"))) end
    local wrong = url:gsub("/runs/(%x)", function(c) return "/runs/" .. (c == "0" and "1" or "0") end)
    local status = core.http.request{ method = "GET", url = wrong, deadline_ms = 10000 }
    assert.equal(404, status)
    assert.equal(200, (core.http.request{ method = "GET", url = url, deadline_ms = 10000 }))

    -- Slack runs write transcripts, and the record holds the runs
    assert.matches("%.jsonl", capture(("ls -R %s/st/transcripts"):format(state)))
    assert.is_nil(capture(("cat %s/st/record.db* %s/st/transcripts/*/*"):format(state, state)):find(m.key, 1, true),
      "the model key reached the record or a transcript")
    stop_bot()
  end))

  it("gives a follow-up queued behind a long run its whole budget", async(function()
    -- a two-minute run keeping 5 s in reserve: 115 s for its commands. The first run holds
    -- the thread for a 65 s command; a clock started at the queueing would leave the
    -- follow-up's 65 s command at most 115 - 65 + (the few seconds between the first command's
    -- start and the queueing) — under 65 s, clipped, exit 124. Its own clock leaves it 50 s for
    -- its model turn and workspace before the command (a loaded machine took 31 s; with a
    -- one-minute run and 35 + 30 s commands that clipped it).
    local budget = P.dir{
      github = function(src) return src .. '\nclone_url = "http://127.0.0.1:' .. gitport .. '/{repo}.git"\n' end,
      agents = function(src) return src .. "\nagents.coding.max_run_minutes = 2\n" end,
      timeouts = function(src) return src .. "\nrun.reserve_ms = 5 * second\n" end,
    }
    m:script{
      bash("sleep 65; echo first-done"), say("First done."),
      bash("sleep 65; echo full-budget"), say("Second done."),
    }
    start_bot(budget)
    local T = "1700000200.000100"
    st:envelope("events_api", SL.mention{ ts = T, text = "agent:coding wait a while in acme/api" })
    local ok = pcall(SL.wait, function()
      local c = st:cards(T)[1]
      return c and SL.card_text(c):find("sleep 65", 1, true)
    end, "the first run's command", 60000)
    if not ok then
      local c = st:cards(T)[1]
      error("no command on the card: " .. (c and SL.card_text(c) or "(no card)") .. "\n" .. require("cjson").encode(m:requests()[2].body.messages))
    end
    -- effort: makes it a run of its own (a plain mention would go to the working run: issue 40)
    st:envelope("events_api", SL.mention{ ts = "1700000200.000200", thread_ts = T, text = "effort:medium wait again" })
    SL.wait(function()
      for _, c in ipairs(st:cards(T)) do
        local t = SL.card_text(c)
        if t:find("queued behind", 1, true) then return t:find("wait a while", 1, true) end
      end
    end, "the follow-up's card saying what it is queued behind", 60000)
    local f = wait_finals(st, T, 2, 2 * 120000 + 60000) -- two two-minute runs, and a loaded machine's wait
    local reqs = m:requests()
    assert.equal(4, #reqs)
    local results = model.tool_results(reqs[4])
    assert.matches("full-budget", results[1].content, 1, true)
    assert.is_nil(results[1].is_error)
    assert.matches("✓ done", SL.card_text(f[2]), 1, true)
    stop_bot()
  end))

  it("gives the first run the thread's earlier messages with their authors, and an attached image as an image block", async(function()
    m:script{ say("I see the screenshot."), say("Still here.") }
    start_bot()
    local T = "1700000400.000100"
    st:control("thread", { channel = "C0GEN", ts = T, messages = {
      { ts = T, user = "U0BEN", text = "login fails with a 500 since this morning" },
      { ts = "1700000400.000150", user = "U0ANA", text = "the stack trace says TimeoutError in auth.js" },
    } })
    -- a 1×1 PNG and a log file attached to the mention; a zip is named and skipped
    local png = "iVBORw0KGgoAAAANSUhEUgAAAAEAAAABCAYAAAAfFcSJAAAADUlEQVR42mP8z8BQDwAEhQGAhKmMIQAAAABJRU5ErkJggg=="
    local _, img = st:control("file", { name = "shot.png", mimetype = "image/png", content_b64 = png })
    local _, log = st:control("file", { name = "server.log", mimetype = "text/plain",
      content_b64 = core.crypto.base64_encode("ERROR TimeoutError at auth.js:42\n") })
    local _, zip = st:control("file", { name = "dump.zip", mimetype = "application/zip", content_b64 = "UEsFBgAAAAAAAAAAAAAAAAAAAAAAAA==" })
    local ev = SL.mention{ ts = "1700000400.000200", thread_ts = T, text = "agent:general what is wrong here?" }
    ev.event.files = { img, log, zip }
    st:envelope("events_api", ev)
    local f = wait_finals(st, T, 1)
    local card = SL.card_text(f[1])
    assert.matches("context: 2 earlier messages of this thread", card, 1, true)
    assert.matches("dump.zip (application/zip) was not read", card, 1, true)
    local req = m:requests()[1]
    local content = req.body.messages[#req.body.messages].content
    local kinds, all = {}, {}
    for _, b in ipairs(content) do
      kinds[#kinds + 1] = b.type
      if b.type == "text" then all[#all + 1] = b.text end
      if b.type == "image" then
        assert.equal("base64", b.source.type)
        assert.equal("image/png", b.source.media_type)
        assert.equal(png, b.source.data)
      end
    end
    assert.same({ "text", "image", "text", "text" }, kinds)
    all = table.concat(all, "\n")
    assert.matches("ben: login fails with a 500 since this morning", all, 1, true)
    assert.matches("ana: the stack trace says TimeoutError in auth.js", all, 1, true)
    assert.matches("ERROR TimeoutError at auth.js:42", all, 1, true)
    assert.matches("what is wrong here?", all, 1, true)
    -- every file was fetched with the bot token
    for _, dl in ipairs(st:state().downloads) do assert.equal("bot", dl.token) end
    assert.equal(2, #st:state().downloads)
    -- a follow-up does not get the thread's messages again (its conversation has them)
    st:envelope("events_api", SL.mention{ ts = "1700000400.000300", thread_ts = T, text = "agent:general and now?" })
    wait_finals(st, T, 2)
    local second = m:requests()[2]
    local last = second.body.messages[#second.body.messages]
    assert.equal("and now?", type(last.content) == "string" and last.content or last.content[1].text)
    stop_bot()
  end))

  it("starts a run from a direct message", async(function()
    m:script{ say("Hello from a DM.") }
    start_bot()
    st:envelope("events_api", SL.mention{ ts = "1700000500.000100", channel = "D0ANA", channel_type = "im",
      type = "message", text = "agent:general hi there" })
    local f = wait_finals(st, "1700000500.000100", 1)
    assert.matches("Hello from a DM.", SL.card_text(f[1]), 1, true)
    assert.equal(1, #m:requests())
    stop_bot()
  end))

  it("loses nothing acknowledged when the bot is SIGKILLed mid-run, and the thread continues", async(function()
    local marker = state .. "/orphan.pid"
    m:script{
      say("The answer is 42."),
      bash("echo $$ > " .. marker .. "; exec sleep 120"),
      say("Continuing after the crash."),
    }
    start_bot()
    local T = "1700000300.000100"
    st:envelope("events_api", SL.mention{ ts = T, text = "agent:coding what is the answer in acme/api" })
    wait_finals(st, T, 1)
    st:envelope("events_api", SL.mention{ ts = "1700000300.000200", thread_ts = T, text = "now run something long" })
    SL.wait(function() return files.read(marker) end, "the long command to start", 60000)
    bot:signal("KILL")
    bot:wait()
    start_bot()
    st:envelope("events_api", SL.mention{ ts = "1700000300.000300", thread_ts = T, text = "where were we" })
    wait_finals(st, T, 2)
    local reqs = m:requests()
    assert.equal(3, #reqs)
    local said = texts(reqs[3])
    for _, line in ipairs({ "user: what is the answer in acme/api", "assistant: The answer is 42.",
                            "now run something long", "where were we" }) do
      assert.is_not_nil(said:find(line, 1, true), ("lost: %q in\n%s"):format(line, said))
    end
    stop_bot()
  end))
end)
