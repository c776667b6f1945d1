-- An agent run on a repository: the ask names OWNER/REPO, switchboard clones it into the
-- thread's workspace through the executor before the first turn (a follow-up fetches), with
-- the token handed to git through its environment. The GitHub side is
-- tests/support/git_standin.py: git's smart-HTTP server behind basic auth on loopback, so a
-- clone without the token fails as it does on github.com. A `git` shim first on PATH records
-- every git command line the run starts.
local core = require("switchboard.core")
local bin = require("support.bin")
local files = require("support.files")
local cards = require("support.cards")
local model = require("support.model")
local policies = require("support.policies")

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

describe("agent runs on a repository", function()
  local state, token, git, m

  before_each(function()
    state = files.tmpdir()
    token = "ghs_spec" .. core.crypto.hex(core.crypto.random_bytes(16))
    -- a bare repository acme/api with one commit, served by the stand-in
    sh(("cd %s && mkdir -p repos/acme gitd shim && git init -q --bare repos/acme/api.git"
      .. " && git init -q src && cd src && echo 'hello from acme' > README && git add README"
      .. " && git -c user.email=s@x -c user.name=s commit -qm init"
      .. " && git push -q ../repos/acme/api.git HEAD:refs/heads/main"
      .. " && git -C ../repos/acme/api.git symbolic-ref HEAD refs/heads/main"):format(state))
    local shim = state .. "/shim/git"
    local f = assert(io.open(shim, "w"))
    f:write("#!/bin/sh\nprintf '%s\\n' \"$*\" >> '" .. state .. "/git-argv'\nexec /usr/bin/git \"$@\"\n")
    f:close()
    sh("chmod +x " .. shim)
    os.execute(("/usr/bin/python3 tests/support/git_standin.py --dir %s/gitd --root %s/repos --token %s >%s/gitd/out 2>&1 &")
      :format(state, state, token, state))
    core.run(function()
      git = model.wait_for(function() return files.read(state .. "/gitd/port") end, 180000) -- python3 on a loaded machine: the file ends the wait
    end)
    assert(git, "the git stand-in did not start: " .. (files.read(state .. "/gitd/out") or ""))
  end)

  after_each(function()
    if m then core.run(function() m.stop() end) end
    m = nil
    local pid = files.read(state .. "/gitd/pid")
    if pid then os.execute("kill -9 " .. pid .. " 2>/dev/null") end
    os.execute("rm -rf '" .. state .. "'")
    policies.cleanup()
  end)

  local function session(answers, lines, env_extra)
    local pol = policies.dir{
      github = function(src) return src .. '\nclone_url = "http://127.0.0.1:' .. git .. '/{repo}.git"\n' end,
    }
    local r, reqs
    core.run(function()
      m = model.start()
      m:script(answers)
      local env = bin.env{ HOME = state, SWITCHBOARD_STATE_DIR = state .. "/st", ANTHROPIC_BASE_URL = m.url,
                           ANTHROPIC_API_KEY = m.key, GH_TOKEN = token,
                           PATH = state .. "/shim:" .. os.getenv("PATH") }
      for k, v in pairs(env_extra or {}) do env[k] = v or nil end
      local proc = assert(core.spawn{ argv = { BIN, "--policies", pol, "console" }, env = env,
                                      stdin = table.concat(lines, "\n") .. "\n", deadline_ms = 120000 })
      r = proc:wait()
      reqs = m:requests()
    end)
    assert.is_false(r.timed_out)
    return r.stdout, r.stderr, reqs
  end

  it("clones before the first turn with the token in no argv, .git/config, log or transcript; a follow-up fetches", function()
    local out, err, reqs = session({
      { content = { { type = "tool_use", name = "bash", input = { command = "cat README; echo token=$GH_TOKEN" } } } },
      { content = { { type = "text", text = "The README greets you." } } },
      { content = { { type = "text", text = "Still there." } } },
    }, { "agent:coding what does the README in acme/api say?", "agent:coding and now?" }, nil)
    local first = cards.find(out, "README in acme/api")
    assert.matches("^%[main%] agent:coding · local · acme/api\nnote: local executor: unwalled[^\n]*\nnote: cloned acme/api\n", first)
    assert.matches("✓ done after 2 turns", first, 1, true)
    local second = cards.find(out, "and now%?")
    assert.matches("note: fetched acme/api", second, 1, true)
    -- the command ran in the checkout
    assert.matches("^hello from acme\ntoken=", model.tool_results(reqs[2])[1].content)
    -- the stand-in refused the token-less try and served the authenticated one
    local log = files.read(state .. "/gitd/log")
    assert.matches("auth=none", log, 1, true)
    assert.matches("POST /acme/api.git/git%-upload%-pack 200 auth=good", log)
    -- where the token must never be
    local ws = cat(state .. "/st/workspaces/*/.git/config")
    assert.matches("url = http://127.0.0.1:" .. git .. "/acme/api.git", ws, 1, true)
    assert.not_matches(token, ws, 1, true)
    local argv = files.read(state .. "/git-argv")
    assert.matches("clone", argv, 1, true)
    assert.matches("fetch", argv, 1, true)
    assert.not_matches(token, argv, 1, true)
    assert.not_matches(token, out .. err, 1, true)
    local transcript = cat(state .. "/st/transcripts/*/*.jsonl")
    assert.matches("token=[redacted]", transcript, 1, true)
    assert.not_matches(token, transcript, 1, true)
  end)

  it("a follow-up reads the cache: the system prompt is the same, the run's facts open its ask, the toolchains are not asked again", function()
    -- a toolchain of the policy's list that logs each time it is asked
    local shim = state .. "/shim/make"
    local f = assert(io.open(shim, "w"))
    f:write("#!/bin/sh\nprintf '%s\\n' \"$*\" >> '" .. state .. "/make-argv'\necho 'GNU Make 9.9'\n")
    f:close()
    sh("chmod +x " .. shim)
    local _, _, reqs = session({
      { content = { { type = "tool_use", name = "bash", input = { command = "echo note > notes.txt" } } } },
      { content = { { type = "text", text = "Noted." } } },
      { content = { { type = "text", text = "Still noted." } } },
      -- the other thread runs beside the first: its answer is matched by its ask
      { match = "what is in acme/api", content = { { type = "text", text = "Another thread." } } },
    }, { "agent:review write a note in acme/api", "agent:review and now?", "/thread other",
         "agent:review what is in acme/api?" }, nil)
    assert.equal(4, #reqs)
    local main, other = {}, nil
    for _, r in ipairs(reqs) do
      if r.matched then other = r else main[#main + 1] = r end
    end
    -- asked once: not by the follow-up (the workspace's file), nor by the new thread's workspace
    -- (the same backend and agent: the same image; it started beside the first and waited)
    assert.equal("--version\n", files.read(state .. "/make-argv"))
    assert.matches("GNU Make 9.9", model.system_text(other.body), 1, true)
    -- the same system prompt in another thread of the same agent and repository
    assert.equal(model.system_text(main[1].body), model.system_text(other.body))
    local first, follow = main[1], main[3]
    -- byte-identical system prompt and tools, though the workspace's git status changed
    assert.equal(model.system_text(first.body), model.system_text(follow.body))
    assert.same(first.body.tools, follow.body.tools)
    assert.not_matches("## main", model.system_text(first.body), 1, true)
    assert.not_matches("rustup", model.system_text(first.body), 1, true) -- a toolchain whose command fails is left out
    -- the run's facts open each ask: the follow-up's status shows the file the first run wrote
    local msgs = follow.body.messages
    local ask = model.text_of(msgs[#msgs])
    assert.matches("^%[This run: today is " .. os.date("!%A %d %B %Y"), ask)
    assert.matches("?? notes.txt", ask, 1, true)
    assert.matches("and now?", ask, 1, true)
    -- the stand-in accounts usage as the API does: the prefix the first run wrote is read
    local u = follow.usage
    local total = u.input_tokens + u.cache_read_input_tokens + u.cache_creation_input_tokens
    assert.is_true(u.cache_read_input_tokens / total >= 0.9,
      ("cached share %d of %d input tokens"):format(u.cache_read_input_tokens, total))
    -- the OS and toolchains came from the workspace's facts file on the follow-up
    local transcript = cat(state .. "/st/transcripts/*/*.jsonl")
    local cached = {}
    for line in transcript:gmatch("[^\n]+") do
      local doc = require("cjson").decode(line)
      if doc.type == "environment" then cached[#cached + 1] = doc.facts.cached end
    end
    table.sort(cached, function(a, b) return tostring(a) < tostring(b) end)
    assert.same({ false, false, true }, cached)
  end)

  it("a follow-up's fetch runs beside its first request, and its tool calls wait for the fetch", function()
    -- git fetch waits (up to 20 s, then fails) until the model has the follow-up's first request
    local f = assert(io.open(state .. "/shim/git", "w"))
    f:write(("#!/bin/sh\nprintf '%%s\\n' \"$*\" >> '%s/git-argv'\n"
      .. "case \" $* \" in *' fetch '*)\n"
      .. "  i=0; while [ ! -e '%s/first-request' ]; do i=$((i+1)); [ $i -gt 400 ] && exit 1; sleep 0.05; done\n"
      .. "  /usr/bin/git \"$@\"; rc=$?; touch '%s/fetch-done'; exit $rc;;\nesac\nexec /usr/bin/git \"$@\"\n")
      :format(state, state, state))
    f:close()
    local out, err = session({
      { content = { { type = "text", text = "Cloned." } } },
      { content = { { type = "tool_use", name = "bash", input = { command = "test -e '" .. state .. "/fetch-done' && echo the fetch came first" } } },
        touch = state .. "/first-request" },
      { content = { { type = "text", text = "Fetched." } } },
    }, { "agent:review what is in acme/api?", "agent:review and now?" }, nil)
    local follow = cards.find(out, "and now%?")
    assert.is_not_nil(follow, out .. err)
    assert.matches("✓ done after 2 turns", follow, 1, true)
    assert.matches("note: fetched acme/api", follow, 1, true)
    local transcript = cat(state .. "/st/transcripts/*/*.jsonl")
    assert.matches("the fetch came first", transcript, 1, true)
  end)

  it("a clone that fails is a legible card and no model turn", function()
    local out, _, reqs = session({}, { "agent:coding fix the tests in acme/missing" }, nil)
    local c = cards.find(out, "acme/missing")
    assert.matches("✗ not run — the repository could not be cloned\ngit could not clone acme/missing from http://127.0.0.1:"
      .. git .. "/acme/missing.git (exit 128):\nfatal: repository", c, 1, true)
    assert.matches("Check that the repository exists", c, 1, true)
    assert.equal(0, #reqs)
  end)
end)

-- Issue 37: through a sandboxd, a follow-up after the thread's instance slept finds its
-- workspace kept (the card says so, and that background processes ended), and one whose slept
-- workspace the budget evicted is told "workspace expired (policy …): re-cloned …". sandboxd
-- runs --no-walls here: a walled instance cannot reach the git stand-in on the host's loopback.
describe("agent runs on a repository through sandboxd, after the thread's instance slept", function()
  local sb = require("support.sandbox")
  local state, token, git, m

  before_each(function()
    state = files.tmpdir()
    token = "ghs_spec" .. core.crypto.hex(core.crypto.random_bytes(16))
    sh(("cd %s && mkdir -p repos/acme gitd && git init -q --bare repos/acme/api.git"
      .. " && git init -q src && cd src && echo 'hello from acme' > README && git add README"
      .. " && git -c user.email=s@x -c user.name=s commit -qm init"
      .. " && git push -q ../repos/acme/api.git HEAD:refs/heads/main"
      .. " && git -C ../repos/acme/api.git symbolic-ref HEAD refs/heads/main"):format(state))
    os.execute(("/usr/bin/python3 tests/support/git_standin.py --dir %s/gitd --root %s/repos --token %s >%s/gitd/out 2>&1 &")
      :format(state, state, token, state))
    core.run(function()
      git = model.wait_for(function() return files.read(state .. "/gitd/port") end, 180000)
    end)
    assert(git, "the git stand-in did not start: " .. (files.read(state .. "/gitd/out") or ""))
  end)

  after_each(function()
    if m then core.run(function() m.stop() end) end
    m = nil
    sb.cleanup_servers()
    local pid = files.read(state .. "/gitd/pid")
    if pid then os.execute("kill -9 " .. pid .. " 2>/dev/null") end
    os.execute("rm -rf '" .. state .. "'")
    policies.cleanup()
  end)

  -- Two asks in one console session; between them the script waits until sandboxd has no
  -- instance awake (the thread's slept: sleep_after 2 s, S.FAST) and, when `evicted`, until its
  -- workspace was evicted.
  local function two_asks(isolation_extra, evicted)
    local pol = policies.dir{
      github = function(src) return src .. '\nclone_url = "http://127.0.0.1:' .. git .. '/{repo}.git"\n' end,
      -- sleep_after 2 s (S.FAST): the default 5 min would make the test wait five minutes
      timeouts = function(src) return src .. "\n" .. sb.FAST .. "\n" end,
      isolation = function(src) return src .. "\n" .. isolation_extra .. "\n" end,
    }
    local r
    core.run(function()
      -- --no-walls: a walled instance cannot reach the git stand-in on the host's loopback (the walled keep is walls_keep_spec)
      local server = sb.start_sandboxd{ policies = pol, args = { "--no-walls" } }
      m = model.start()
      m:script({
        { content = { { type = "tool_use", name = "bash", input = { command = "echo built > untracked.txt; (setsid sleep 1000 >/dev/null 2>&1 &)" } } } },
        { content = { { type = "text", text = "Built." } } },
        { content = { { type = "tool_use", name = "bash", input = { command = "cat untracked.txt 2>&1; cat README" } } } },
        { content = { { type = "text", text = "Looked." } } },
      })
      local script = table.concat({
        "set -u",
        "wait_until() { for _ in $(seq 600); do eval \"$1\" && return 0; sleep 0.1; done; echo \"gave up: $1\" >&2; return 1; }",
        "healthz() { curl -s -H \"authorization: Bearer $SANDBOX_TOKEN\" \"$URL/healthz\"; }",
        "{ echo 'agent:coding build something in acme/api'",
        "  wait_until 'grep -q \"^note: cloned acme/api\" out 2>/dev/null && healthz | grep -q \"\\\"awake\\\":0\"'",
        evicted and "  wait_until 'ls \"$ROOT/.expired\" 2>/dev/null | grep -q .'" or "  :",
        "  echo 'agent:coding and now, in acme/api?'",
        "} | \"$BIN\" --policies \"$POL\" console --backend sandbox --sandbox-url \"$URL\" > out",
        "cat out",
      }, "\n")
      local proc = assert(core.spawn{ argv = { "bash", "-c", script }, cwd = state, deadline_ms = 120000,
        env = bin.env{ HOME = state, SWITCHBOARD_STATE_DIR = state .. "/st", BIN = BIN, POL = pol,
          URL = server.url, ROOT = server.root, SANDBOX_TOKEN = sb.TOKEN, ANTHROPIC_BASE_URL = m.url,
          ANTHROPIC_API_KEY = m.key, GH_TOKEN = token } })
      r = proc:wait()
      r.reqs = m:requests()
      server:stop(); server:wait()
    end)
    assert.is_false(r.timed_out, r.stderr)
    return r.stdout, r.reqs
  end

  it("a follow-up finds the workspace kept, and the card says background processes ended", function()
    local out, reqs = two_asks("")
    local second = cards.find(out, "and now, in acme/api")
    assert.matches("note: workspace kept from its sleep", second, 1, true)
    assert.matches("background processes ended at sleep", second, 1, true)
    assert.matches("note: fetched acme/api", second, 1, true)
    assert.matches("^built\nhello from acme", model.tool_results(reqs[4])[1].content)
  end)

  it("a follow-up whose slept workspace the budget evicted is told why, and re-clones", function()
    local out, reqs = two_asks("slept_max_bytes = 0", true)
    local second = cards.find(out, "and now, in acme/api")
    -- re-cloned, or (sandboxd/bases.lua) started from the base the first ask's clone left
    assert.matches("note: workspace expired (policy: slept workspaces past 0 MiB, policies/isolation.lua "
      .. "slept_max_bytes; the oldest go first): ", second, 1, true)
    assert.truthy(second:find("the oldest go first): re-cloned acme/api", 1, true)
      or second:find("the oldest go first): started from a snapshot of", 1, true), second)
    -- the workspace took the thread's branch, which the first ask pushed: its commit is there
    assert.matches(" branch switchboard/", second, 1, true)
    assert.matches("^built\nhello from acme", model.tool_results(reqs[4])[1].content)
  end)
end)
