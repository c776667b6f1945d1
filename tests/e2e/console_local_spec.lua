-- `switchboard console` as a black box: the real binary, asks through a pipe (or a FIFO when
-- the test must act while it runs), no configuration but a scratch state directory, the
-- local backend.
local core = require("switchboard.core")
local bin = require("support.bin")

local BIN = bin.path
if BIN:sub(1, 1) ~= "/" then BIN = os.getenv("PWD") .. "/" .. BIN end

local files = require("support.files")
local procs = require("support.procs")
local tmpdir, read_file, alive = files.tmpdir, files.read, procs.alive

-- A plain GH_TOKEN gives the console a credential, so cards carry no "no credential" note
-- and compare exactly; `false` in extra removes a variable.
local function env_for(state, extra)
  local env = bin.env{ HOME = state, SWITCHBOARD_STATE_DIR = state, BIN = BIN,
                       GH_TOKEN = "specs-own-token" }
  for k, v in pairs(extra or {}) do env[k] = v or nil end
  return env
end

-- The console with `input` on its stdin (a pipe). Returns the process result.
local function console(state, input, args, extra_env)
  local r
  core.run(function()
    local argv = { BIN }
    for _, a in ipairs(args or { "console" }) do argv[#argv + 1] = a end
    local proc = assert(core.spawn{ argv = argv, env = env_for(state, extra_env), stdin = input,
                                    deadline_ms = 60000 })
    r = proc:wait()
  end)
  assert.is_false(r.timed_out, "the console did not end")
  return r
end

-- A bash script (the driver of a timing-dependent session); DIR and BIN are set.
local function script(state, body, extra_env)
  local r
  core.run(function()
    local proc = assert(core.spawn{ argv = { "bash", "-c", "set -u\n" .. body },
                                    env = env_for(state, extra_env), cwd = state,
                                    deadline_ms = 60000 })
    r = proc:wait()
  end)
  assert.is_false(r.timed_out, "the session did not end: " .. tostring(r.stderr))
  return r
end

-- The blocks of a pipe session's output (cards and answers, each followed by a blank line).
local cards = require("support.cards")
local blocks, find_block = cards.blocks, cards.find

describe("switchboard console (local backend, through a pipe)", function()
  local state
  before_each(function() state = tmpdir() end)
  after_each(function() os.execute("rm -rf '" .. state .. "'") end)

  it("runs an ask, and a follow-up in the thread reuses its workspace; another thread does not", function()
    local r = console(state, table.concat({
      "run `echo hi > marker.txt`",
      "run `cat marker.txt`",
      "/thread other",
      "run `cat marker.txt`",
    }, "\n") .. "\n")
    assert.equal(0, r.exit, r.stderr)
    local b = blocks(r.stdout)
    assert.equal("thread: other", b[1])
    assert.matches("^%[main%] agent:coding · local\nnote: local executor: unwalled[^\n]*\n%$ echo hi > marker.txt\n✓ exit 0 after [%d.]+s\n%(no output%)$",
      find_block(r.stdout, "echo hi"))
    assert.matches("^%[main%] agent:coding · local\nnote: local executor: unwalled[^\n]*\n%$ cat marker.txt\n✓ exit 0 after [%d.]+s\nhi$",
      find_block(r.stdout, "^%[main%][^\n]*\nnote: [^\n]*\n%$ cat"))
    assert.matches("^%[other%] agent:coding · local\nnote: local executor: unwalled[^\n]*\n%$ cat marker.txt\n✗ exit 1 after [%d.]+s\n.*No such file",
      find_block(r.stdout, "^%[other%]"))
    -- no configuration: the workspaces live under the state directory
    local p = io.popen("ls '" .. state .. "/workspaces'")
    local dirs = p:read("a")
    p:close()
    assert.matches("console_main%-%x+", dirs)
    assert.matches("console_other%-%x+", dirs)
    -- a pipe shows only final cards: no running lines, no terminal control bytes
    assert.not_matches("… running", r.stdout)
    assert.not_matches("\27", r.stdout)
  end)

  it("answers an unknown agent with the agents it has and the grammar", function()
    local r = console(state, "agent:wizard run `ls`\n")
    assert.equal(0, r.exit)
    local b = blocks(r.stdout)
    assert.equal(1, #b)
    assert.matches('^%[main%] There is no agent "wizard"%.\nAsk like this:\n', b[1])
    assert.matches("\n  agent:NAME run `COMMAND` in OWNER/REPO +", b[1])
    assert.matches("\n  /thread NAME +switch to thread NAME", b[1])
    assert.matches("\nAgents:\n  coding +Changes code: [^\n]+%(default, works in a repository%)", b[1])
    assert.matches("\n  general +Answers questions without a repository[^\n]+%(no repository%)", b[1])
    assert.matches("\n  review +Reviews a repository", b[1])
  end)

  it("says once, on the first card that needs one, that there is no GitHub credential",
    function()
      local r = console(state, "agent:general run `true`\nrun `true`\nrun `true`\n", nil,
        { GH_TOKEN = false })
      assert.equal(0, r.exit)
      local _, notes = r.stdout:gsub("note: no GitHub credential: commands get no token", "")
      assert.equal(1, notes, r.stdout)
      local cards = blocks(r.stdout)
      assert.is_nil(cards[1]:find("no GitHub credential", 1, true), "general has no token scope")
      assert.truthy(cards[2]:find("no GitHub credential", 1, true), cards[2])
    end)

  it("gives a no-repository agent the null executor's legible error", function()
    local r = console(state, "agent:general run `ls`\n")
    assert.equal(0, r.exit)
    assert.matches("^%[main%] agent:general · local\n%$ ls\n✗ not run\ntool bash needs a workspace, "
      .. "but agent general declares no repository — a wiring bug: give the agent "
      .. "resources%.repository in policies/agents%.lua", blocks(r.stdout)[1])
  end)

  it("answers a malformed ask and a bad repository with the grammar", function()
    local r = console(state, "run ls\nrun `ls` in nowhere\n/nope\n")
    assert.equal(0, r.exit)
    local b = blocks(r.stdout)
    assert.matches("^%[main%] I could not read that ask: put the command in backticks: run `ls`%.\nAsk like this:", b[1])
    assert.matches('^%[main%] I could not read that ask: "nowhere" is not a repository name; name it as '
      .. "OWNER/REPO, for example `in acme/api`%.\nAsk like this:", b[2])
    assert.equal("/nope is not a console command; there are /thread NAME, /new and /help", b[3])
  end)

  it("at end of input waits for the last ask to finish, then exits 0", function()
    local t0 = os.time()
    local r = console(state, "run `sleep 1; echo late`") -- no final newline either
    assert.equal(0, r.exit)
    assert.matches("\n✓ exit 0 after [%d.]+s\nlate$", blocks(r.stdout)[1]) -- 1 s idle, more when loaded
    assert.is_true(os.time() - t0 < 30)
  end)

  it("cuts a long output to the card limit and keeps the whole of it under the state directory", function()
    local r = console(state, "run `seq 1 20000`\n")
    assert.equal(0, r.exit)
    local card = blocks(r.stdout)[1]
    assert.is_true(#card <= 4000, "card is " .. #card .. " bytes")
    local path = card:match("the whole output is in (%S+)%] …")
    assert.equal(state .. "/outputs/", path:sub(1, #state + 9))
    local whole = read_file(path)
    assert.matches("^%$ seq 1 20000\n1\n2\n", whole)
    assert.matches("\n19999\n20000\n$", whole)
  end)

  it("stop kills the running command at once (its process group) and the card says stopped", function()
    local r = script(state, [[
      mkfifo in
      "$BIN" console < in > out 2> err & pid=$!
      exec 3> in
      echo 'run `sleep 60 & echo $! > '"$PWD"'/bg; echo $$ > '"$PWD"'/pid; wait`' >&3
      for i in $(seq 400); do [ -s bg ] && [ -s pid ] && break; sleep 0.05; done
      echo stop >&3
      start=$(date +%s%N)
      exec 3>&-
      wait $pid; echo "exit=$?" >> out
      echo "stop_to_exit_ms=$(( ($(date +%s%N) - start) / 1000000 ))" >> out
    ]])
    assert.equal(0, r.exit, r.stderr)
    local out = read_file(state .. "/out")
    assert.matches("exit=0\n", out)
    assert.matches("^%[main%] agent:coding · local\nnote: local executor: unwalled[^\n]*\n%$ sleep 60 & [^\n]*\n■ stopped after [%d.]+s — the "
      .. "command's process group was killed; the executor was released\n%[stopped: stop asked in this thread",
      blocks(out)[1])
    local ms = tonumber(out:match("stop_to_exit_ms=(%d+)"))
    assert.is_true(ms < 30000, "the stop took " .. ms .. " ms") -- generous; the command runs 60 s
    -- the group was sent KILL and its leader reaped; the background job ends when it next runs,
    -- which on a loaded machine is a while later: waited for
    local leader, bg = tonumber(read_file(state .. "/pid")), tonumber(read_file(state .. "/bg"))
    core.run(function()
      local t0 = core.now_ms()
      while (alive(leader) or alive(bg)) and core.now_ms() - t0 < 30000 do core.sleep(20) end
    end)
    assert.is_false(alive(leader), "the shell survived")
    assert.is_false(alive(bg), "its background job survived")
  end)

  it("TERM stops reading, lets the running ask finish and exits 0", function()
    local r = script(state, [[
      mkfifo in
      "$BIN" console < in > out 2> err & pid=$!
      exec 3> in
      echo 'run `touch '"$PWD"'/started; sleep 1; echo drained`' >&3
      for i in $(seq 400); do [ -f started ] && break; sleep 0.05; done
      kill -TERM $pid
      for i in $(seq 1200); do grep -q 'SIGTERM: not reading' out && break; sleep 0.05; done
      trap '' PIPE # the console may have closed its end already: then this line is refused
      echo 'run `echo read-after-term`' >&3 2>/dev/null || true
      wait $pid; echo "exit=$?" >> out
    ]])
    assert.equal(0, r.exit, r.stderr)
    local out = read_file(state .. "/out")
    assert.matches("exit=0\n", out)
    assert.matches("SIGTERM: not reading any more; running asks get 30s to finish", out)
    assert.matches("\n✓ exit 0 after %d+%.%ds\ndrained", out) -- 1 s idle, more when loaded
    assert.not_matches("read%-after%-term", out)
  end)

  it("TERM kills what outlives console.drain_ms, and still exits 0", function()
    os.execute("cp -r policies '" .. state .. "/pol'")
    local f = assert(io.open(state .. "/pol/timeouts.lua", "a"))
    f:write("\nconsole.drain_ms = 300\n")
    f:close()
    local r = script(state, [[
      mkfifo in
      "$BIN" --policies pol console < in > out 2> err & pid=$!
      exec 3> in
      echo 'run `echo $$ > '"$PWD"'/pid; sleep 60`' >&3
      for i in $(seq 400); do [ -s pid ] && break; sleep 0.05; done
      kill -TERM $pid
      wait $pid; echo "exit=$?" >> out
    ]])
    assert.equal(0, r.exit, r.stderr)
    local out = read_file(state .. "/out")
    assert.matches("exit=0\n", out)
    assert.matches("\n■ stopped after [%d.]+s — the command's process group was killed", out)
    assert.matches("the drain time ran out", out)
    assert.is_false(alive(tonumber(read_file(state .. "/pid"))))
  end)

  it("SIGHUP reloads the policies: new asks see the new ones", function()
    os.execute("cp -r policies '" .. state .. "/pol'")
    local r = script(state, [[
      mkfifo in
      "$BIN" --policies pol console < in > out 2> err & pid=$!
      exec 3> in
      echo 'run `echo before`' >&3
      for i in $(seq 400); do grep -q '^before$' out && break; sleep 0.05; done
      sed -i 's/^default_agent = "coding"/default_agent = "general"/' pol/agents.lua
      kill -HUP $pid
      for i in $(seq 400); do grep -q 'policies reloaded' out && break; sleep 0.05; done
      echo 'run `echo after`' >&3
      exec 3>&-
      wait $pid; echo "exit=$?" >> out
    ]])
    assert.equal(0, r.exit, r.stderr)
    local out = read_file(state .. "/out")
    assert.matches("exit=0\n", out)
    local b = blocks(out)
    assert.matches("^%[main%] agent:coding · local\nnote: local executor: unwalled[^\n]*\n%$ echo before\n✓ exit 0", b[1])
    -- the old and the new version, and what changed
    assert.matches('^policies reloaded %(version %x+ → %x+%); new asks use them\n  agents: default_agent "coding" → "general"$', b[2])
    assert.matches("^%[main%] agent:general · local\n%$ echo after\n✗ not run\n", b[3])
  end)

  it("a reload that fails keeps the old policies and says why", function()
    os.execute("cp -r policies '" .. state .. "/pol'")
    local r = script(state, [[
      mkfifo in
      "$BIN" --policies pol console < in > out 2> err & pid=$!
      exec 3> in
      echo 'run `echo ready`' >&3
      for i in $(seq 400); do grep -q '^ready$' out && break; sleep 0.05; done
      echo 'bash.max_ms = 0' >> pol/timeouts.lua
      kill -HUP $pid
      for i in $(seq 400); do grep -q 'policy reload failed' out && break; sleep 0.05; done
      echo 'run `echo still`' >&3
      exec 3>&-
      wait $pid; echo "exit=$?" >> out
    ]])
    assert.equal(0, r.exit, r.stderr)
    local out = read_file(state .. "/out")
    assert.matches("policy reload failed, nothing changed:\n  pol/timeouts%.lua:%d+: ", out) -- the file edited
    assert.matches("\n✓ exit 0 after [%d.]+s\nstill", out)
  end)

  it("on a terminal, updates the running ask's elapsed time in place", function()
    if not os.execute("command -v script >/dev/null 2>&1") then
      pending("util-linux `script` is not installed: no pseudo-terminal to test with")
      return
    end
    local r = script(state, [[
      { echo 'run `sleep 2.2; echo tty-done`'; sleep 4; } | script -qfec "$BIN console" /dev/null > out
      echo "exit=$?" >> out
    ]])
    assert.equal(0, r.exit, r.stderr)
    local out = read_file(state .. "/out")
    assert.matches("exit=0", out)
    assert.truthy(out:find("\r\27[2K[main] coding running 1s", 1, true), "no in-place update")
    assert.truthy(out:find("\r\27[2K[main] coding running 2s", 1, true))
    assert.matches("✓ exit 0 after [%d.]+s\r?\ntty%-done", out) -- 2.2 s idle, more when loaded
  end)
end)
