-- Agent craft end to end (docs/agent.md "Repository instructions", "edit_file", "Pull
-- requests"): the real `switchboard console` with a GitHub App configured against loopback
-- stand-ins —
--   tests/support/github_standin.lua  GitHub's App and pull-request routes: it mints
--       installation tokens, checks the token on every pull-request call, and writes each
--       token it mints with its scope to a file
--   tests/support/git_standin.py      git's smart-HTTP server (git http-backend) over the
--       bare repository, reading that file: any minted token clones, only a write one pushes
--   tests/support/model_standin.py    the Messages API, scripted
-- A `git` shim first on PATH records every git command line; every process's argv is scanned
-- while the console runs. No token may appear in an argv, .git/config, a log line, the
-- transcript or a card.
local core = require("switchboard.core")
local bin = require("support.bin")
local files = require("support.files")
local cards = require("support.cards")
local model = require("support.model")
local policies = require("support.policies")
local standin = require("support.github_standin")
local SL = require("support.slack")

local BIN = bin.path
if BIN:sub(1, 1) ~= "/" then BIN = os.getenv("PWD") .. "/" .. BIN end

local function sh(cmd)
  local ok = os.execute(cmd)
  assert(ok, "failed: " .. cmd)
end

local function cat(pattern)
  local p = io.popen("cat " .. pattern .. " 2>/dev/null")
  local s = p:read("a")
  p:close()
  return s
end

local function slurp(path)
  local f = io.open(path, "rb")
  if not f then return nil end
  local s = f:read("a")
  f:close()
  return s
end

local function all_argv()
  local out = {}
  for _, name in ipairs(core.fs.list("/proc") or {}) do
    if type(name) == "table" then name = name.name end
    if name:find("^%d+$") then
      local s = slurp("/proc/" .. name .. "/cmdline")
      if s and s ~= "" then out[tonumber(name)] = s end
    end
  end
  return out
end

local function count(text, plain)
  local n, pos = 0, 1
  while true do
    local i = text:find(plain, pos, true)
    if not i then return n end
    n, pos = n + 1, i + #plain
  end
end

local BIG = ("Claude: keep functions small.\n"):rep(1200) -- 36,000 bytes: over max_file_bytes

describe("agent craft: repository instructions, edit_file and the pull request", function()
  local state, gitport, m, w

  before_each(function()
    state = files.tmpdir()
    sh(("cd %s && mkdir -p repos/acme gitd shim && git init -q --bare repos/acme/api.git"
      .. " && git init -q src && cd src"
      .. " && printf 'Welcome to teh project.\\nSee teh docs.\\n' > README.md"
      .. " && printf 'AGENTS-MARKER: run make check before you finish.\\n' > AGENTS.md"
      .. " && printf '\\211PNG\\r\\n\\032\\n\\000\\000teh' > logo.png"
      .. " && git add . && git -c user.email=s@x -c user.name=s commit -qm init"
      .. " && git push -q ../repos/acme/api.git HEAD:refs/heads/main"
      .. " && git -C ../repos/acme/api.git symbolic-ref HEAD refs/heads/main"):format(state))
    local f = assert(io.open(state .. "/src/CLAUDE.md", "w"))
    f:write(BIG)
    f:close()
    sh(("cd %s/src && git add CLAUDE.md && git -c user.email=s@x -c user.name=s commit -qm claude"
      .. " && git push -q ../repos/acme/api.git HEAD:refs/heads/main"):format(state))
    local shim = state .. "/shim/git"
    f = assert(io.open(shim, "w"))
    f:write("#!/bin/sh\nprintf '%s\\n' \"$*\" >> '" .. state .. "/git-argv'\nexec /usr/bin/git \"$@\"\n")
    f:close()
    sh("chmod +x " .. shim)
    os.execute(("env -u LD_PRELOAD /usr/bin/python3 tests/support/git_standin.py --dir %s/gitd --root %s/repos --tokens-file %s/tokens >%s/gitd/out 2>&1 &")
      :format(state, state, state, state))
    core.run(function()
      gitport = model.wait_for(function() return files.read(state .. "/gitd/port") end, 10000)
    end)
    assert(gitport, "the git stand-in did not start: " .. (files.read(state .. "/gitd/out") or ""))
  end)

  after_each(function()
    if m then core.run(function() m.stop() end) end
    m = nil
    local pid = files.read(state .. "/gitd/pid")
    if pid then os.execute("kill -9 " .. pid .. " 2>/dev/null") end
    os.execute("rm -rf '" .. state .. "'")
    policies.cleanup()
  end)

  -- One console session with the App configured; agents_edit changes policies/agents.lua.
  -- → stdout, stderr, the model's requests, the argv scan's leak (or nil) and scan count
  local function session(answers, lines, agents_edit)
    local pol = policies.dir{
      github = function(src) return src .. '\nclone_url = "http://127.0.0.1:' .. gitport .. '/{repo}.git"\n' end,
      agents = agents_edit,
    }
    local r, reqs, leak, scans
    core.run(function()
      w = standin.world{ policy = function() return policies.shipped() end, real_clock = true,
                         tokens_file = state .. "/tokens", repos_root = state .. "/repos" }
      local key_path = state .. "/app.pem"
      policies.write(key_path, w.priv)
      os.execute("chmod 600 '" .. key_path .. "'")
      m = model.start()
      m:script(answers)
      local env = bin.env{ HOME = state, SWITCHBOARD_STATE_DIR = state .. "/st", ANTHROPIC_BASE_URL = m.url,
                           ANTHROPIC_API_KEY = m.key, GITHUB_APP_ID = "12345",
                           GITHUB_APP_PRIVATE_KEY = key_path, GITHUB_API_URL = w.gh.api_url,
                           PATH = state .. "/shim:" .. os.getenv("PATH") }
      env.GH_TOKEN = nil
      local proc = assert(core.spawn{ argv = { BIN, "--log-level", "debug", "--policies", pol, "console" },
                                      env = env, stdin = table.concat(lines, "\n") .. "\n", deadline_ms = 120000 })
      local done = false
      core.go(function() r = proc:wait(); done = true end)
      scans = 0
      while not done do
        for pid, args in pairs(all_argv()) do
          local found = w.leak(args)
          if found then leak = ("pid %d argv carries %s"):format(pid, found) end
        end
        scans = scans + 1
        core.sleep(10)
      end
      reqs = m:requests()
      w.close()
    end)
    assert.is_false(r.timed_out)
    return r.stdout, r.stderr, reqs, leak, scans
  end

  local function remote(args)
    local p = io.popen(("git --git-dir=%s/repos/acme/api.git %s 2>&1"):format(state, args))
    local s = p:read("a")
    p:close()
    return s
  end

  local function no_secret_anywhere(out, err, leak)
    assert.is_nil(leak)
    assert.is_nil(w.leak(out), "a card carries a secret")
    for line in err:gmatch("[^\n]+") do assert.is_nil(w.leak(line), "log line carries a secret: " .. line) end
    assert.is_nil(w.leak(cat(state .. "/st/workspaces/*/.git/config")), ".git/config carries a token")
    assert.is_nil(w.leak(files.read(state .. "/git-argv") or ""), "a git argv carries a token")
    assert.is_nil(w.leak(cat(state .. "/st/transcripts/*/*.jsonl")), "the transcript carries a token")
  end

  it("reads AGENTS.md into the system prompt, edits exactly, opens a PR; a follow-up updates it; review never pushes", function()
    local function edit(path, old, new, all)
      return { type = "tool_use", name = "edit_file", input = { path = path, old_text = old, new_text = new, replace_all = all } }
    end
    local out, err, reqs, leak, scans = session({
      -- the first ask: fix the typo
      { content = { edit("README.md", "teh", "the"), edit("README.md", "Welcom to  teh", "x"),
                    edit("logo.png", "teh", "the"), edit("README.md", "Welcome to teh", "Welcome to the") } },
      { content = { edit("README.md", "teh", "the", true) } },
      { content = { { type = "text", text = "Fixed the typo teh → the in README.md (2 places)." } } },
      -- the follow-up in the same thread
      { content = { edit("README.md", "See the docs.\n", "See the docs.\nThanks.\n") } },
      { content = { { type = "text", text = "Added a thanks line." } } },
      -- the review agent scribbles with bash; it must never push
      { content = { { type = "tool_use", name = "bash", input = { command = "echo scribble >> README.md; git status --short" } } } },
      { content = { { type = "text", text = "Reviewed." } } },
    }, { "agent:coding fix the typo in README.md in acme/api", "agent:coding also thank the reader",
         "agent:review look at README.md in acme/api" })
    assert.is_true(scans >= 5, "the argv scan ran " .. scans .. " times")

    -- 1. the instructions: AGENTS.md whole, CLAUDE.md cut with a note, on the card too
    local first = cards.find(out, "fix the typo")
    assert.is_not_nil(first, out .. err)
    assert.matches("note: instructions: AGENTS.md, CLAUDE.md (cut to 32768 of 36000 bytes)", first, 1, true)
    local system = reqs[1].body.system[1].text
    assert.matches("### AGENTS.md\nAGENTS-MARKER: run make check before you finish.", system, 1, true)
    assert.matches("[cut here: CLAUDE.md is 36000 bytes; only the first 32768 are shown", system, 1, true)
    assert.equal(1, count(system, "### CLAUDE.md"))

    -- 2. edit_file: repeated, missing, binary, unique; then replace_all
    local r1 = model.tool_results(reqs[2])
    assert.equal(4, #r1)
    assert.is_true(r1[1].is_error)
    assert.matches("old_text occurs 2 times in README.md (at lines 1, 2)", r1[1].content, 1, true)
    assert.is_true(r1[2].is_error)
    assert.matches("old_text occurs 0 times in README.md", r1[2].content, 1, true)
    assert.matches("    1> Welcome to teh project.", r1[2].content, 1, true)
    assert.is_true(r1[3].is_error)
    assert.matches("logo.png is not a text file", r1[3].content, 1, true)
    assert.is_nil(r1[4].is_error)
    assert.equal("edited README.md: replaced 1 occurrence at line 1", r1[4].content)
    assert.equal("edited README.md: replaced 1 occurrence at line 2", model.tool_results(reqs[3])[1].content)
    assert.same({ "bash", "read_file", "write_file", "edit_file" }, model.tool_names(reqs[1]))

    -- 3. the pull request: opened, linked on the card, its body linking the thread
    local branch = first:match("%(branch (switchboard/main%-%x+)%)")
    assert.is_not_nil(branch, first)
    assert.matches("✓ done after 3 turns", first, 1, true)
    assert.matches("⇢ pull request #1 opened: https://github.com/acme/api/pull/1 (branch " .. branch .. ")", first, 1, true)
    local prs = w.gh.pulls["acme/api"]
    assert.equal(1, #prs)
    assert.equal(branch, prs[1].head)
    assert.equal("main", prs[1].base)
    assert.equal("fix the typo in README.md in acme/api", prs[1].title)
    assert.matches("Asked of agent `coding` in thread main:", prs[1].bodies[1], 1, true)
    assert.matches("> fix the typo in README.md in acme/api", prs[1].bodies[1], 1, true)
    assert.matches("Fixed the typo teh → the", prs[1].bodies[1], 1, true)
    for _, call in ipairs(w.gh.pr_calls) do assert.equal("write", call.scope) end

    -- the follow-up: the same branch, the same pull request, updated
    local second = cards.find(out, "also thank the reader")
    assert.matches("⇢ pull request #1 updated: https://github.com/acme/api/pull/1 (branch " .. branch .. ")", second, 1, true)
    assert.equal(1, #w.gh.pulls["acme/api"])
    assert.equal(1, prs[1].updates)
    assert.equal(2, #prs[1].bodies)
    assert.matches("Added a thanks line.", prs[1].body, 1, true)
    assert.equal("fix the typo in README.md in acme/api", prs[1].title) -- the title stays the first ask's
    assert.equal("Welcome to the project.\nSee the docs.\nThanks.\n", remote("show " .. branch .. ":README.md"))
    assert.equal("switchboard[bot] <switchboard[bot]@users.noreply.github.com>\nswitchboard[bot] <switchboard[bot]@users.noreply.github.com>\n",
      remote("log --format='%an <%ae>' main.." .. branch))
    assert.equal("Welcome to teh project.\nSee teh docs.\n", remote("show main:README.md"))

    -- the review agent: offered neither write tool, and it never pushed its scribble
    local third = cards.find(out, "look at README.md")
    assert.matches("✓ done after 2 turns", third, 1, true)
    assert.not_matches("pull request", third, 1, true)
    assert.same({ "bash", "read_file" }, model.tool_names(reqs[6]))
    local log = files.read(state .. "/gitd/log")
    assert.equal(2, count(log, "POST /acme/api.git/git-receive-pack 200 auth=good"))
    assert.equal(2, count(log, "POST /acme/api.git/git-receive-pack"))
    assert.equal("Welcome to the project.\nSee the docs.\nThanks.\n", remote("show " .. branch .. ":README.md"))
    assert.equal(1, prs[1].updates)

    no_secret_anywhere(out, err, leak)
    local transcript = cat(state .. "/st/transcripts/*/*.jsonl")
    assert.matches('"type":"publish"', transcript, 1, true)
  end)

  it("a coding agent with the read token: the push is refused by the remote and the card says what to do", function()
    local out, err, _, leak = session({
      { content = { { type = "tool_use", name = "edit_file", input = { path = "README.md", old_text = "Welcome to teh", new_text = "Welcome to the" } } } },
      { content = { { type = "text", text = "Fixed one." } } },
    }, { "agent:coding fix the typo in README.md in acme/api" },
    function(src) return (src:gsub('token_scope = "write",', 'token_scope = "read",', 1)) end)
    local c = cards.find(out, "fix the typo")
    assert.is_not_nil(c, out .. err)
    assert.matches("✓ done after 2 turns", c, 1, true)
    assert.matches("✗ no pull request — GitHub refused the push to acme/api (403): the token this agent got cannot write", c, 1, true)
    assert.matches('token_scope = "write"', c, 1, true)
    local log = files.read(state .. "/gitd/log")
    assert.matches("GET /acme/api.git/info/refs 403 auth=read", log, 1, true) -- service=git-receive-pack
    assert.equal(nil, w.gh.pulls["acme/api"])
    assert.matches("refs/heads/main", remote("for-each-ref --format='%(refname)'"), 1, true)
    assert.not_matches("switchboard/", remote("for-each-ref --format='%(refname)'"), 1, true)
    no_secret_anywhere(out, err, leak)
  end)

  it("from Slack: the card links the pull request, and its body links the Slack thread's permalink", function()
    local pol = policies.dir{
      github = function(src) return src .. '\nclone_url = "http://127.0.0.1:' .. gitport .. '/{repo}.git"\n' end,
    }
    local text, err
    core.run(function()
      w = standin.world{ policy = function() return policies.shipped() end, real_clock = true,
                         tokens_file = state .. "/tokens", repos_root = state .. "/repos" }
      policies.write(state .. "/app.pem", w.priv)
      m = model.start()
      m:script{
        { content = { { type = "tool_use", name = "edit_file", input = { path = "README.md", old_text = "teh", new_text = "the", replace_all = true } } } },
        { content = { { type = "text", text = "Fixed both." } } },
      }
      local st = SL.standin()
      local bot = SL.bot(st, { state_dir = state .. "/st", policies = pol, env = {
        ANTHROPIC_BASE_URL = m.url, ANTHROPIC_API_KEY = m.key, GITHUB_APP_ID = "12345",
        GITHUB_APP_PRIVATE_KEY = state .. "/app.pem", GITHUB_API_URL = w.gh.api_url, GH_TOKEN = false,
        HOME = state, PATH = state .. "/shim:" .. os.getenv("PATH") } })
      st:envelope("events_api", SL.mention{ ts = "1700000100.000100", text = "agent:coding fix the typo in README.md in acme/api" })
      local final = SL.wait(function()
        for _, c in ipairs(st:cards("1700000100.000100")) do
          if SL.is_final(c) and SL.card_text(c):find("pull request", 1, true) then return c end
        end
      end, "the final card with the pull request", 90000)
      text = SL.card_text(final)
      bot:signal("TERM")
      bot:wait()
      err = bot.err
      st:close()
      w.close()
    end)
    assert.matches("pull request #1 opened: https://github.com/acme/api/pull/1", text, 1, true)
    local pr = w.gh.pulls["acme/api"][1]
    assert.matches("in https://acme.slack.com/archives/C0GEN/p1700000100000100:", pr.body, 1, true)
    assert.equal("Welcome to the project.\nSee the docs.\n", remote("show " .. pr.head .. ":README.md"))
    assert.matches("^switchboard/t0acme%-c0gen%-", pr.head)
    for line in err:gmatch("[^\n]+") do assert.is_nil(w.leak(line), "log line carries a secret: " .. line) end
  end)
end)
