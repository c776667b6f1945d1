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
local files = require("support.files")
local cards = require("support.cards")
local model = require("support.model")
local policies = require("support.policies")
local standin = require("support.github_standin")
local SL = require("support.slack")
local craft = require("support.craft")

local sh, cat, count, cjson_text = craft.sh, craft.cat, craft.count, craft.cjson_text
local use, edit_then_say = craft.use, craft.edit_then_say

describe("agent craft: repository instructions, edit_file, the pull request, finding one's way", function()
  local state, gitport, m, w, H

  before_each(function()
    state = files.tmpdir()
    gitport = craft.setup(state)
    H = { state = state, gitport = gitport }
  end)

  after_each(function()
    craft.teardown(state, m or H.m)
    m, w = nil, nil
  end)

  -- One console session with the App configured; agents_edit changes policies/agents.lua.
  -- → stdout, stderr, the model's requests, the argv scan's leak (or nil) and scan count
  local function session(answers, lines, agents_edit)
    local res = table.pack(craft.session(H, answers, lines, agents_edit))
    m, w = H.m, H.w
    return table.unpack(res, 1, res.n)
  end
  local function remote(args) return craft.remote(state, args) end
  local function no_secret_anywhere(out, err, leak) return craft.no_secret_anywhere(state, w, out, err, leak) end
  local function push_files(list) return craft.push_files(state, list) end
  local function rg_barrier() return craft.rg_barrier(state) end

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
    -- scans during the session, not only the one at its start (a warm run is fast now: issue 36)
    assert.is_true(scans >= 3, "the argv scan ran " .. scans .. " times")

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
    assert.same({ "bash", "read_file", "write_file", "edit_file", "glob", "grep", "list", "web_fetch", "screenshot", "todo_write" }, model.tool_names(reqs[1]))

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
    assert.same({ "bash", "read_file", "glob", "grep", "list", "todo_write" }, model.tool_names(reqs[6]))
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
    assert.same({ "bash", "read_file", "glob", "grep", "list", "todo_write" }, model.tool_names(reqs[1]))

    -- the workspace's facts in the system prompt: sandbox, repository, default branch
    local system = model.system_text(reqs[1].body)
    assert.matches("Repository: acme/api; its default branch is main.", system, 1, true)
    assert.matches("This run publishes nothing: do not commit, push or open a pull request.", system, 1, true)
    assert.matches("The sandbox runs [^\n]*Linux", system) -- /etc/os-release's name (Debian GNU/Linux …)
    assert.matches("git version %d", system)
    assert.matches("Scratch directory for notes, logs and throwaway scripts: .git/switchboard-scratch", system, 1, true)
    -- the run's facts open the ask: date, branch, git status
    local opening = model.text_of(reqs[1].body.messages[1])
    assert.matches("[This run: today is " .. os.date("!%A %d %B %Y"), opening, 1, true)
    assert.matches("changes are published on branch none (this run publishes nothing)", opening, 1, true)
    assert.matches("`git status` at the start:\n## main...origin/main", opening, 1, true)

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
end)
