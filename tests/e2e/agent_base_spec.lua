-- Issue 37 item 3: repository bases. A repository declares .switchboard/setup.sh (here: it
-- counts its runs in a file outside the workspace, leaves a marker and sleeps 3 s). Through a
-- real sandboxd, the first new thread on the repository clones and runs it, and its workspace
-- becomes the repository's base; a second new thread starts from a copy of that base — the
-- marker there, setup not run again, the default branch's newest commit fetched — and the card
-- says "workspace from a snapshot of <sha> …". A base past bases_refresh_ms is prepared again.
-- The GitHub side is tests/support/git_standin.py; sandboxd runs --no-walls (a walled instance
-- cannot reach the stand-in on the host's loopback, as in agent_clone_spec.lua).
local core = require("switchboard.core")
local bin = require("support.bin")
local files = require("support.files")
local cards = require("support.cards")
local model = require("support.model")
local policies = require("support.policies")
local sb = require("support.sandbox")

local BIN = bin.path
if BIN:sub(1, 1) ~= "/" then BIN = os.getenv("PWD") .. "/" .. BIN end

local function sh(cmd)
  local ok = os.execute(cmd)
  assert(ok, "failed: " .. cmd)
end

local function lines_of(path)
  local n = 0
  for _ in (files.read(path) or ""):gmatch("[^\n]+") do n = n + 1 end
  return n
end

describe("a new thread on a repository with a prepared base", function()
  local state, token, git, m

  before_each(function()
    state = files.tmpdir()
    token = "ghs_spec" .. core.crypto.hex(core.crypto.random_bytes(16))
    local setup = "#!/bin/sh\necho ran >> '" .. state .. "/setup-runs'\necho prepared > .setup-marker\nsleep 3\n"
    sh(("mkdir -p %s/src/.switchboard"):format(state))
    local f = assert(io.open(state .. "/src/.switchboard/setup.sh", "w"))
    f:write(setup)
    f:close()
    sh(("cd %s && mkdir -p repos/acme gitd && git init -q --bare repos/acme/api.git"
      .. " && git init -q src && cd src && echo 'hello from acme' > README && git add README .switchboard"
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

  -- Asks, each in a new console thread of its own, one after the other, against one sandboxd;
  -- between(i) runs after ask i. Returns each ask's console output, the model's requests and
  -- the sandboxd's root.
  local function threads(isolation_extra, asks, between)
    local pol = policies.dir{
      github = function(src) return src .. '\nclone_url = "http://127.0.0.1:' .. git .. '/{repo}.git"\n' end,
      timeouts = function(src) return src .. "\n" .. sb.FAST .. "\n" end,
      isolation = function(src) return src .. "\n" .. (isolation_extra or "") .. "\n" end,
    }
    local outs, reqs, root = {}, nil, nil
    core.run(function()
      -- --no-walls: a walled instance cannot reach the git stand-in on the host's loopback (walls_base_spec covers the walled bases)
      local server = sb.start_sandboxd{ policies = pol, args = { "--no-walls" } }
      root = server.root
      m = model.start()
      local script = {}
      for _, a in ipairs(asks) do
        script[#script + 1] = { content = { { type = "tool_use", name = "bash", input = { command = a.command } } } }
        script[#script + 1] = { content = { { type = "text", text = "Looked." } } }
      end
      m:script(script)
      for i, a in ipairs(asks) do
        local proc = assert(core.spawn{ argv = { BIN, "--policies", pol, "console", "--backend", "sandbox",
            "--sandbox-url", server.url, "--thread", a.thread }, cwd = state, deadline_ms = 120000,
          stdin = a.text .. "\n",
          env = bin.env{ HOME = state, SWITCHBOARD_STATE_DIR = state .. "/st", SANDBOX_TOKEN = sb.TOKEN,
            ANTHROPIC_BASE_URL = m.url, ANTHROPIC_API_KEY = m.key, GH_TOKEN = token } })
        local r = proc:wait()
        assert.is_false(r.timed_out, r.stderr)
        outs[i] = r.stdout
        if between then between(i, server) end
      end
      reqs = m:requests()
      server:stop(); server:wait()
    end)
    return outs, reqs, root
  end

  local function push_second_commit()
    sh(("cd %s/src && echo second > SECOND && git add SECOND && git -c user.email=s@x -c user.name=s commit -qm second"
      .. " && git push -q ../repos/acme/api.git HEAD:refs/heads/main"):format(state))
  end

  it("the first thread prepares it (setup runs once); the second starts from its copy, fetched", function()
    local outs, reqs = threads(nil, {
      { thread = "one", text = "agent:coding look in acme/api", command = "cat .setup-marker; git log -1 --format=%s" },
      { thread = "two", text = "agent:coding look in acme/api too",
        command = "cat .setup-marker; git log -1 --format=%s; git status --porcelain --untracked-files=no | wc -l; test -e .git/switchboard-base && echo marker || echo no-marker; echo mine > .git/own.txt" },
      { thread = "three", text = "agent:coding and again in acme/api", command = "ls .git/own.txt 2>&1 | grep -c 'No such'" },
    }, function(i) if i == 1 then push_second_commit() end end)
    local first = cards.find(outs[1], "look in acme/api")
    assert.matches("note: cloned acme/api", first, 1, true)
    assert.matches("note: .switchboard/setup.sh ran", first, 1, true)
    assert.matches("^prepared\ninit", model.tool_results(reqs[2])[1].content)
    local second = cards.find(outs[2], "look in acme/api too")
    assert.matches("note: fetched acme/api", second, 1, true)
    assert.matches("note: workspace from a snapshot of %x+ %(main%), %d+ %a+ old", second)
    assert.not_matches("setup.sh", second, 1, true)
    -- the base's marker, the newest commit of main (fetched after the copy), no changes, and
    -- sandboxd's marker gone from the thread's copy
    assert.matches("^prepared\nsecond\n%s*0\nno%-marker", model.tool_results(reqs[4])[1].content)
    -- a thread's copy is its own: the third, from the same base, has no own.txt
    assert.matches("^1", model.tool_results(reqs[6])[1].content)
    assert.equal(1, lines_of(state .. "/setup-runs"))
  end)

  -- the bot heard a push to main (fronts/slack/app.lua → dispatch/pushes.lua): the clone's
  -- /exec carries baseSince, the push's time; here sent as the bot's executor sends it
  it("a push since the base was made marks it stale: the next new thread prepares it again", function()
    local answer
    local outs = threads(nil, {
      { thread = "one", text = "agent:coding look in acme/api", command = "cat .setup-marker" },
      { thread = "two", text = "agent:coding look in acme/api too", command = "cat .setup-marker; git log -1 --format=%s" },
      { thread = "three", text = "agent:coding and again in acme/api", command = "git log -1 --format=%s" },
    }, function(i, server)
      if i ~= 1 then return end
      push_second_commit()
      local body = ('{"command":"true","env":{},"base":"acme/api","baseSince":%d}'):format(os.time() + 1)
      local p = io.popen(("curl -s -H 'authorization: Bearer %s' -H 'x-thread-key: probe' --data-binary '%s' %s/exec")
        :format(sb.TOKEN, body, server.url))
      answer = p:read("a")
      p:close()
    end)
    assert.matches('"exitCode":0', answer, 1, true)
    local second = cards.find(outs[2], "look in acme/api too")
    assert.matches("note: cloned acme/api", second, 1, true)
    assert.matches("note: .switchboard/setup.sh ran", second, 1, true)
    -- the second thread's clone is the new base: the third starts from it, at the pushed commit
    local third = cards.find(outs[3], "and again in acme/api")
    assert.matches("note: workspace from a snapshot of", third, 1, true)
    assert.equal(2, lines_of(state .. "/setup-runs"))
  end)

  it("a base past bases_refresh_ms is prepared again by the next new thread", function()
    local outs = threads("bases_refresh_ms = 0", {
      { thread = "one", text = "agent:coding look in acme/api", command = "cat .setup-marker" },
      { thread = "two", text = "agent:coding look in acme/api too", command = "cat .setup-marker" },
    })
    local second = cards.find(outs[2], "look in acme/api too")
    assert.matches("note: cloned acme/api", second, 1, true)
    assert.matches("note: .switchboard/setup.sh ran", second, 1, true)
    assert.equal(2, lines_of(state .. "/setup-runs"))
  end)
end)
