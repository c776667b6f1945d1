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

local function cjson_text(v) return require("cjson").encode(v) end

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
    assert.same({ "bash", "read_file", "write_file", "edit_file", "glob", "grep", "list" }, model.tool_names(reqs[1]))

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
    assert.same({ "bash", "read_file", "glob", "grep", "list" }, model.tool_names(reqs[6]))
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
    local text, err, final_blocks
    core.run(function()
      w = standin.world{ policy = function() return policies.shipped() end, real_clock = true,
                         tokens_file = state .. "/tokens", repos_root = state .. "/repos" }
      policies.write(state .. "/app.pem", w.priv)
      m = model.start()
      m:script{
        { content = { { type = "tool_use", name = "edit_file", input = { path = "README.md", old_text = "teh", new_text = "the", replace_all = true } } } },
        { content = { { type = "text", text = "**Fixed** both typos in `README.md`." } } },
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
      final_blocks = final.blocks
      bot:signal("TERM")
      bot:wait()
      err = bot.err
      st:close()
      w.close()
    end)
    assert.matches("pull request #1 opened: <https://github.com/acme/api/pull/1>", text, 1, true)
    -- the card reads like Slack: the answer as mrkdwn text (no code block), the pull request a button
    local button, answer
    for _, b in ipairs(final_blocks) do
      if b.type == "actions" then
        for _, e in ipairs(b.elements) do if e.type == "button" and e.url then button = e end end
      end
      if b.type == "section" and b.text.text:find("Fixed", 1, true) then answer = b.text.text end
    end
    assert.is_not_nil(button, "no pull request button")
    assert.equal("https://github.com/acme/api/pull/1", button.url)
    assert.equal("Open pull request #1", button.text.text)
    assert.equal("*Fixed* both typos in `README.md`.", answer)
    local pr = w.gh.pulls["acme/api"][1]
    assert.matches("in https://acme.slack.com/archives/C0GEN/p1700000100000100:", pr.body, 1, true)
    assert.equal("Welcome to the project.\nSee the docs.\n", remote("show " .. pr.head .. ":README.md"))
    assert.matches("^switchboard/t0acme%-c0gen%-", pr.head)
    for line in err:gmatch("[^\n]+") do assert.is_nil(w.leak(line), "log line carries a secret: " .. line) end
  end)

  -- Files committed on main in the bare repository (path → content).
  local function push_files(list)
    for path, content in pairs(list) do
      sh(("mkdir -p \"$(dirname '%s/src/%s')\""):format(state, path))
      local f = assert(io.open(state .. "/src/" .. path, "w"))
      f:write(content)
      f:close()
    end
    sh(("cd %s/src && git add -A && git -c user.email=s@x -c user.name=s commit -qm more"
      .. " && git push -q ../repos/acme/api.git HEAD:refs/heads/main"):format(state))
  end

  -- An rg first on PATH that waits (up to 20 s) until a second rg has started before it runs
  -- the real one, and writes how many it saw: two calls that overlap both see 2; two calls one
  -- after the other: the first sees 1.
  local function rg_barrier()
    local shim = state .. "/shim/rg"
    local f = assert(io.open(shim, "w"))
    f:write(([[#!/bin/sh
d='%s/rg-runs'; mkdir -p "$d"; : > "$d/$$"
i=0; while [ "$(ls "$d" | wc -l)" -lt 2 ] && [ $i -lt 200 ]; do sleep 0.1; i=$((i+1)); done
ls "$d" | wc -l > '%s/rg-seen.'$$
exec /usr/bin/rg "$@"
]]):format(state, state))
    f:close()
    sh("chmod +x " .. shim)
  end

  local function use(name, input) return { type = "tool_use", name = name, input = input } end

  it("finds its way: numbered lines, glob/grep/list through the executor at the same time, nested AGENTS.md, the run's facts", function()
    local lines = {}
    for i = 1, 300 do lines[i] = i == 150 and "func Hello() {}" or ("line " .. i) end
    push_files{
      ["pkg/x.go"] = table.concat(lines, "\n") .. "\n",
      ["pkg/AGENTS.md"] = "PKG-MARKER: run go vet in pkg/ before you finish.\n",
      ["docs/AGENTS.md"] = "DOCS-MARKER: never read.\n",
      [".gitignore"] = "build/\n",
    }
    rg_barrier()
    local out, err, reqs = session({
      { content = {
        use("bash", { command = "mkdir -p build && echo 'func Hello() {}' > build/gen.go" }),
        use("read_file", { path = "pkg/x.go", offset = 200, limit = 3 }),
        use("glob", { pattern = "**/*.go" }),
        use("grep", { pattern = "func Hello", context = 1, glob = "*.go" }),
        use("list", { path = "pkg" }),
      } },
      { content = { use("read_file", { path = "pkg/x.go", offset = 299 }), use("grep", { pattern = "no-such-thing-here" }),
                    use("list", { path = "../.." }) } },
      { content = { { type = "text", text = "Hello is in pkg/x.go at line 150." } } },
    }, { "agent:review where is Hello defined in acme/api" })

    local c = cards.find(out, "where is Hello")
    assert.is_not_nil(c, out .. err)
    assert.matches("✓ done after 3 turns", c, 1, true)
    assert.same({ "bash", "read_file", "glob", "grep", "list" }, model.tool_names(reqs[1]))

    -- the facts in the system prompt: date, sandbox, repository, branches, git status
    local system = model.system_text(reqs[1].body)
    assert.matches("Today is " .. os.date("!%A %d %B %Y"), system, 1, true)
    assert.matches("Repository: acme/api; its default branch is main.", system, 1, true)
    assert.matches("This run publishes nothing: do not commit, push or open a pull request.", system, 1, true)
    assert.matches("The sandbox runs [^\n]*Linux", system) -- /etc/os-release's name (Debian GNU/Linux …)
    assert.matches("git version %d", system)
    assert.matches("`git status` at the start:\n## main...origin/main", system, 1, true)
    assert.matches("Scratch directory for notes, logs and throwaway scripts: .git/switchboard-scratch", system, 1, true)

    local r = model.tool_results(reqs[2])
    assert.equal(5, #r)
    assert.equal("[lines 200-202 of 300; read on with offset 203]\n   200\tline 200\n   201\tline 201\n   202\tline 202", r[2].content)
    assert.matches("pkg/x.go", r[3].content, 1, true)
    assert.not_matches("build/gen.go", r[3].content, 1, true) -- .gitignore'd
    assert.equal("pkg/x.go-149-line 149\npkg/x.go:150:func Hello() {}\npkg/x.go-151-line 151", r[4].content)
    assert.equal("file  AGENTS.md  50 bytes\nfile  x.go  " .. #(table.concat(lines, "\n") .. "\n") .. " bytes", r[5].content)
    -- the nested AGENTS.md entered the conversation after the first read under pkg/, once
    local last = reqs[2].body.messages[#reqs[2].body.messages].content
    local nested = last[#last]
    assert.equal("text", nested.type)
    assert.matches("[The instructions in pkg/AGENTS.md apply to the files under pkg/", nested.text, 1, true)
    assert.matches("PKG-MARKER: run go vet in pkg/", nested.text, 1, true)
    assert.not_matches("DOCS-MARKER", cjson_text(reqs[3].body), 1, true)
    assert.matches("note: instructions for subdirectories: pkg/AGENTS.md", c, 1, true)
    local r2 = model.tool_results(reqs[3])
    assert.equal("   299\tline 299\n   300\tline 300", r2[1].content:match("\n(.*)$"))
    assert.matches("^%[lines 299%-300 of 300%]", r2[1].content)
    assert.equal("no match for no-such-thing-here", r2[2].content)
    assert.is_true(r2[3].is_error)
    assert.matches("may not leave the workspace", r2[3].content, 1, true)
    assert.equal(1, count(cjson_text(reqs[3].body), "PKG-MARKER"))

    -- glob and grep of turn 1 ran at the same time: each rg saw another start (one after the
    -- other, the first would have waited 20 s and seen 1); turn 2's grep is the third
    local seen = {}
    for n in cat(state .. "/rg-seen.*"):gmatch("%d+") do seen[#seen + 1] = tonumber(n) end
    assert.equal(3, #seen)
    for _, n in ipairs(seen) do assert.is_true(n >= 2, "an rg ran alone: " .. table.concat(seen, ",")) end
    -- the transcript: glob's and grep's spans overlap
    local spans = {}
    for line in cat(state .. "/st/transcripts/*/*.jsonl"):gmatch("[^\n]+") do
      local doc = require("cjson").decode(line)
      if doc.type == "tool_result" and doc.turn == 1 and (doc.name == "glob" or doc.name == "grep") then
        spans[#spans + 1] = { doc.started_ms, doc.started_ms + doc.duration_ms }
      end
    end
    assert.equal(2, #spans)
    assert.is_true(math.max(spans[1][1], spans[2][1]) < math.min(spans[1][2], spans[2][2]), "glob and grep did not overlap")
  end)

  it("a run stopped at its turn limit opens a draft listing its files, without scratch or ignored files; the follow-up adds to it and makes it ready", function()
    push_files{ [".gitignore"] = "build/\n" }
    local out, err, _, leak = session({
      { content = {
        use("write_file", { path = ".git/switchboard-scratch/notes.txt", content = "my plan\n" }),
        use("edit_file", { path = "README.md", old_text = "teh", new_text = "the", replace_all = true }),
        use("bash", { command = "mkdir -p build && echo junk > build/out.o && echo notes > .git/switchboard-scratch/log" }),
      } },
      { content = { use("write_file", { path = "NEW.md", content = "new\n" }) } },
      -- the follow-up finishes
      { content = { use("write_file", { path = "DONE.md", content = "done\n" }) } },
      { content = { { type = "text", text = "Finished: the typo is fixed and NEW.md added." } } },
    }, { "agent:coding fix the typo in README.md in acme/api", "agent:coding finish it" },
    function(src) return (src:gsub("max_turns = 80,", "max_turns = 2,", 1)) end)
    local first = cards.find(out, "fix the typo")
    assert.is_not_nil(first, out .. err)
    assert.matches("⏹ stopped at the turn limit (2)", first, 1, true)
    assert.matches("⇢ draft pull request #1 opened: https://github.com/acme/api/pull/1", first, 1, true)
    local pr = w.gh.pulls["acme/api"][1]
    local body1 = pr.bodies[1]
    assert.matches("**Draft:** the run stopped before the agent said it was done (it used its turn limit)", body1, 1, true)
    assert.matches("## Files changed\n\n- `NEW.md` (added)\n- `README.md` (modified)\n", body1, 1, true)
    -- only the intended changes: no scratch file, nothing .gitignore'd
    local tree = remote("ls-tree -r --name-only " .. pr.head)
    assert.matches("NEW.md", tree, 1, true)
    assert.not_matches("build/", tree, 1, true)
    assert.not_matches("notes.txt", tree, 1, true)
    assert.not_matches("switchboard-scratch", tree, 1, true)
    -- the follow-up: the same pull request, its description kept and added to, marked ready
    local second = cards.find(out, "finish it")
    assert.matches("✓ done after 2 turns", second, 1, true)
    assert.matches("⇢ pull request #1 updated: https://github.com/acme/api/pull/1", second, 1, true)
    assert.equal(1, #w.gh.pulls["acme/api"])
    assert.is_false(pr.draft)
    assert.equal(1, #w.gh.graphql_calls)
    assert.equal("write", w.gh.graphql_calls[1].scope)
    assert.equal(body1, pr.body:sub(1, #body1)) -- the first run's section, as it was
    assert.matches("\n\n---\n\nAsked of agent `coding` in thread main:\n\n> finish it", pr.body, 1, true)
    assert.matches("Finished: the typo is fixed and NEW.md added.", pr.body, 1, true)
    assert.matches("## Files changed\n\n- `DONE.md` (added)\n", pr.body:sub(#body1), 1, true) -- this run's own
    no_secret_anywhere(out, err, leak)
  end)

  -- Publishing failures, each made the way GitHub makes it, through the real push and the stand-ins.
  local function edit_then_say(extra_command)
    local first = { use("edit_file", { path = "README.md", old_text = "teh", new_text = "the", replace_all = true }) }
    if extra_command then first[#first + 1] = use("bash", { command = extra_command }) end
    return { { content = first }, { content = { { type = "text", text = "Fixed." } } } }
  end

  it("a protected branch: GitHub's pre-receive refusal (GH006) reaches the card with what to do", function()
    local hook = state .. "/repos/acme/api.git/hooks/pre-receive"
    local f = assert(io.open(hook, "w"))
    f:write([[#!/bin/sh
while read old new ref; do
  case "$ref" in refs/heads/switchboard/*)
    echo "error: GH006: Protected branch update failed for $ref." >&2
    echo "error: Changes must be made through a pull request." >&2
    exit 1;;
  esac
done
]])
    f:close()
    sh("chmod +x " .. hook)
    local out, err, _, leak = session(edit_then_say(), { "agent:coding fix the typo in README.md in acme/api" })
    local c = cards.find(out, "fix the typo")
    assert.is_not_nil(c, out .. err)
    assert.matches("✓ done after 2 turns", c, 1, true)
    assert.matches("✗ no pull request — GitHub refused the push to switchboard/main%-%x+ in acme/api: the branch is protected %(GH006%)", c)
    assert.matches("Change pull_request.branch in policies/agents.lua", c, 1, true)
    assert.is_nil(w.gh.pulls["acme/api"])
    no_secret_anywhere(out, err, leak)
  end)

  it("a rejected push: someone pushed to the thread's branch meanwhile", function()
    local branch = require("switchboard.agent.publish").branch(policies.shipped(), "main", "console:main")
    local other = ("git clone -q %s/repos/acme/api.git %s/other && cd %s/other && git checkout -q -b %s"
      .. " && echo theirs > theirs.txt && git add . && git -c user.name=o -c user.email=o@x commit -qm theirs"
      .. " && git push -q origin %s"):format(state, state, state, branch, branch)
    local out, err, _, leak = session(edit_then_say(other), { "agent:coding fix the typo in README.md in acme/api" })
    local c = cards.find(out, "fix the typo")
    assert.is_not_nil(c, out .. err)
    assert.matches("✗ no pull request — The push to " .. branch:gsub("%-", "%%-") .. " in acme/api was rejected: the branch on GitHub has commits this workspace lacks", c)
    assert.matches("theirs.txt", remote("ls-tree -r --name-only " .. branch), 1, true) -- theirs is kept
    assert.is_nil(w.gh.pulls["acme/api"])
    no_secret_anywhere(out, err, leak)
  end)

  it("an expired token: GitHub stops accepting the run's token before the push", function()
    -- the git stand-in reads the minted tokens at each request: emptying the file is GitHub
    -- forgetting them (an installation token expires after an hour, or is revoked)
    local out, err, _, leak = session(edit_then_say((": > %s/tokens"):format(state)),
      { "agent:coding fix the typo in README.md in acme/api" })
    local c = cards.find(out, "fix the typo")
    assert.is_not_nil(c, out .. err)
    assert.matches("✗ no pull request — GitHub did not accept the token for the push to acme/api (401)", c, 1, true)
    assert.matches("ask again", c, 1, true)
    -- the push's first request, with the token GitHub no longer knows
    assert.matches("GET /acme/api.git/info/refs 401 auth=bad", files.read(state .. "/gitd/log") or "", 1, true)
    no_secret_anywhere(out, err, leak)
  end)

  it("a repository the App cannot see: the run stops before its first turn, saying where to install the App", function()
    sh(("cd %s && git clone -q --bare repos/acme/api.git repos/acme/lib.git"):format(state))
    local out, err, reqs, leak = session({ { content = { { type = "text", text = "never" } } } },
      { "agent:coding fix the typo in README.md in acme/lib" })
    local c = cards.find(out, "fix the typo")
    assert.is_not_nil(c, out .. err)
    assert.matches("✗ not run — the repository could not be cloned", c, 1, true)
    assert.matches("don't have access to acme/lib", c, 1, true)
    assert.matches("add acme/lib to the selected ones", c, 1, true)
    assert.not_matches("sandbox failure", c, 1, true)
    assert.equal(0, #reqs)
    no_secret_anywhere(out, err, leak)
  end)

  it("a signed review comment on the bot's pull request starts a run that pushes to the same branch and replies; unsigned or replayed does nothing", function()
    local pol = policies.dir{
      github = function(src) return src .. '\nclone_url = "http://127.0.0.1:' .. gitport .. '/{repo}.git"\n' end,
    }
    local WEBHOOK_SECRET = "whsec-" .. core.crypto.hex(core.crypto.random_bytes(12))
    local T = "1700000400.000100"
    local r = {}
    core.run(function()
      w = standin.world{ policy = function() return policies.shipped() end, real_clock = true,
                         tokens_file = state .. "/tokens", repos_root = state .. "/repos" }
      policies.write(state .. "/app.pem", w.priv)
      m = model.start()
      m:script{
        { content = { use("edit_file", { path = "README.md", old_text = "teh", new_text = "the", replace_all = true }) } },
        { content = { { type = "text", text = "Fixed both." } } },
        -- the run the review comment starts
        { content = { use("edit_file", { path = "README.md", old_text = "See the docs.\n", new_text = "See the docs.\nThanks.\n" }) } },
        { content = { { type = "text", text = "Added a thanks line." } } },
      }
      local st = SL.standin()
      local bot = SL.bot(st, { state_dir = state .. "/st", policies = pol, args = { "--listen", "127.0.0.1:0" }, env = {
        ANTHROPIC_BASE_URL = m.url, ANTHROPIC_API_KEY = m.key, GITHUB_APP_ID = "12345",
        GITHUB_APP_PRIVATE_KEY = state .. "/app.pem", GITHUB_API_URL = w.gh.api_url, GH_TOKEN = false,
        SLACK_SIGNING_SECRET = SL.SIGNING_SECRET, GITHUB_WEBHOOK_SECRET = WEBHOOK_SECRET,
        HOME = state, PATH = state .. "/shim:" .. os.getenv("PATH") } })
      st:envelope("events_api", SL.mention{ ts = T, text = "agent:coding fix the typo in README.md in acme/api" })
      SL.wait(function()
        for _, c in ipairs(st:cards(T)) do
          if SL.is_final(c) and SL.card_text(c):find("pull request #1 opened", 1, true) then return c end
        end
      end, "the first run's pull request", 90000)
      local pr = w.gh.pulls["acme/api"][1]
      local function delivery(created_s)
        return require("cjson").encode{
          action = "created", repository = { full_name = "acme/api" },
          pull_request = { number = 1, html_url = pr.html_url, head = { ref = pr.head } },
          comment = { body = "@switchboard please thank the reader after the docs line", user = { login = "rev" },
                      author_association = "COLLABORATOR", path = "README.md", line = 2,
                      created_at = os.date("!%Y-%m-%dT%H:%M:%SZ", created_s),
                      diff_hunk = "@@ -1,2 +1,2 @@\n-See teh docs.\n+See the docs." },
        }
      end
      local body = delivery(os.time())
      local function post(headers)
        headers["content-type"] = "application/json"
        headers["x-github-event"] = headers["x-github-event"] or "pull_request_review_comment"
        return core.http.request{ method = "POST", url = ("http://127.0.0.1:%d/github/webhook"):format(bot.events_port),
                                  body = body, headers = headers, deadline_ms = 10000 }
      end
      local function sig(secret) return "sha256=" .. core.crypto.hex(core.crypto.hmac_sha256(secret, body)) end
      r.unsigned = post{ ["x-github-delivery"] = "d-0" }
      r.forged = post{ ["x-github-delivery"] = "d-0", ["x-hub-signature-256"] = sig("not-the-secret") }
      r.signed = post{ ["x-github-delivery"] = "d-1", ["x-hub-signature-256"] = sig(WEBHOOK_SECRET) }
      SL.wait(function()
        local finals = 0
        for _, c in ipairs(st:cards(T)) do if SL.is_final(c) then finals = finals + 1 end end
        return finals == 2 and w.gh.comments and w.gh.comments["acme/api"]
      end, "the review comment's run and its reply", 90000)
      -- the same delivery again (a redelivery, or a captured request replayed): nothing runs
      r.replayed = post{ ["x-github-delivery"] = "d-1", ["x-hub-signature-256"] = sig(WEBHOOK_SECRET) }
      SL.wait(function() return bot.err:find("github.duplicate_delivery", 1, true) end, "the replay noticed", 30000)
      -- a captured delivery sent again under a new id, two hours on: too old to be a new comment
      body = delivery(os.time() - 2 * 3600)
      r.old = post{ ["x-github-delivery"] = "d-2", ["x-hub-signature-256"] = sig(WEBHOOK_SECRET) }
      SL.wait(function() return bot.err:find("older than the", 1, true) end, "the old comment refused", 30000)
      r.cards = st:cards(T)
      r.reqs = m:requests()
      r.requests = #r.reqs
      bot:signal("TERM")
      bot:wait()
      r.err = bot.err
      st:close()
      w.close()
    end)
    assert.equal(401, r.unsigned)
    assert.equal(401, r.forged)
    assert.equal(202, r.signed)
    assert.equal(202, r.replayed)
    assert.equal(202, r.old)
    assert.matches("github.webhook_refused", r.err, 1, true)
    assert.equal(2, #r.cards) -- one card per run: the replay and the refused ones started none
    assert.equal(4, r.requests)
    local second = SL.card_text(r.cards[2])
    assert.matches("note: started by a review comment from @rev on pull request #1", second, 1, true)
    assert.matches("pull request #1 updated", second, 1, true)
    assert.matches("note: replied on pull request #1", second, 1, true)
    -- the model got the comment, its file and line and the diff hunk
    local msgs = r.reqs[3].body.messages
    local ask = model.text_of(msgs[#msgs])
    assert.matches("A review comment by @rev on pull request #1 on README.md line 2 (https://github.com/acme/api/pull/1):", ask, 1, true)
    assert.matches("> @switchboard please thank the reader after the docs line", ask, 1, true)
    assert.matches("```diff\n@@ -1,2 +1,2 @@\n-See teh docs.\n+See the docs.\n```", ask, 1, true)
    local pr = w.gh.pulls["acme/api"][1]
    -- the same branch, a new commit on it
    assert.equal("Welcome to the project.\nSee the docs.\nThanks.\n", remote("show " .. pr.head .. ":README.md"))
    assert.equal(2, select(2, remote("log --format=%H main.." .. pr.head):gsub("\n", "")))
    local reply = w.gh.comments["acme/api"][1][1]
    assert.matches("^@rev I pushed the changes to `" .. pr.head:gsub("%-", "%%-") .. "`", reply.body)
    assert.matches("Added a thanks line.", reply.body, 1, true)
    assert.equal("write", reply.scope)
    assert.is_nil(w.leak(r.err))
    assert.not_matches(WEBHOOK_SECRET, r.err, 1, true)
  end)

  it("a run stopped with the Stop button still publishes what it did, as a draft", function()
    local pol = policies.dir{
      github = function(src) return src .. '\nclone_url = "http://127.0.0.1:' .. gitport .. '/{repo}.git"\n' end,
    }
    local T = "1700000500.000100"
    local text, final_pr
    core.run(function()
      w = standin.world{ policy = function() return policies.shipped() end, real_clock = true,
                         tokens_file = state .. "/tokens", repos_root = state .. "/repos" }
      policies.write(state .. "/app.pem", w.priv)
      m = model.start()
      m:script{
        { content = { use("edit_file", { path = "README.md", old_text = "teh", new_text = "the", replace_all = true }) } },
        -- the second turn's answer is held: the Stop lands in it
        { content = { { type = "text", text = "never sent" } }, hold_ms = 60000, touch = state .. "/held" },
      }
      local st = SL.standin()
      local bot = SL.bot(st, { state_dir = state .. "/st", policies = pol, env = {
        ANTHROPIC_BASE_URL = m.url, ANTHROPIC_API_KEY = m.key, GITHUB_APP_ID = "12345",
        GITHUB_APP_PRIVATE_KEY = state .. "/app.pem", GITHUB_API_URL = w.gh.api_url, GH_TOKEN = false,
        HOME = state, PATH = state .. "/shim:" .. os.getenv("PATH") } })
      st:envelope("events_api", SL.mention{ ts = T, text = "agent:coding fix the typo in README.md in acme/api" })
      SL.wait(function() return files.read(state .. "/held") end, "the second turn under way", 90000)
      st:envelope("interactive", SL.stop_press(T))
      local final = SL.wait(function()
        for _, c in ipairs(st:cards(T)) do
          if SL.is_final(c) and SL.card_text(c):find("pull request", 1, true) then return c end
        end
      end, "the stopped run's card with its pull request", 90000)
      text = SL.card_text(final)
      final_pr = w.gh.pulls["acme/api"] and w.gh.pulls["acme/api"][1]
      bot:signal("TERM")
      bot:wait()
      st:close()
      w.close()
    end)
    assert.matches("■ stopped", text, 1, true)
    assert.matches("draft pull request #1 opened", text, 1, true)
    assert.is_not_nil(final_pr)
    assert.is_true(final_pr.draft)
    assert.matches("**Draft:** the run stopped before the agent said it was done (it was stopped)", final_pr.body, 1, true)
    assert.equal("Welcome to the project.\nSee the docs.\n", remote("show " .. final_pr.head .. ":README.md"))
  end)
end)
