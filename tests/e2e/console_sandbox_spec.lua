-- `switchboard console --backend sandbox` as a black box against a live `switchboard sandboxd`
-- on loopback: the same sessions as console_local_spec, plus what only a sandbox can do (a
-- full fleet, a sandboxd that dies under a command). Both processes run with scaled-down
-- policies (support.sandbox FAST: 100 ms heartbeats, a 3 s fleet-busy wait).
local core = require("switchboard.core")
local bin = require("support.bin")
local sb = require("support.sandbox")

local BIN = bin.path
if BIN:sub(1, 1) ~= "/" then BIN = os.getenv("PWD") .. "/" .. BIN end

local cards = require("support.cards")
local alive = require("support.procs").alive
local blocks, find_block = cards.blocks, cards.find

-- The two sessions that watch their commands from the host (files written to the spec's own
-- directory, host pids) run without the walls, which exist to forbid exactly that; the walled
-- forms of the same guarantees are in walls_spec.lua.
local NO_WALLS = { "--no-walls" }

describe("switchboard console against a live sandboxd", function()
  local state, pol, server

  -- Starts sandboxd (extra: its own arguments), then runs a bash session script with
  -- BIN, POL (the policy directory), URL and SANDBOX_TOKEN set, in the state directory.
  -- Returns the script's result; the session writes its console output to ./out, and finds
  -- sandboxd's pid in ./sandboxd.pid.
  local function session(body, extra)
    local r
    core.run(function()
      server = sb.start_sandboxd{ policies = pol, args = extra }
      assert(server.url, "sandboxd did not start: " .. server.log())
      local f = assert(io.open(state .. "/sandboxd.pid", "w"))
      f:write(tostring(server.proc.pid), "\n")
      f:close()
      local proc = assert(core.spawn{
        argv = { "bash", "-c", "set -u\n" .. body }, cwd = state, deadline_ms = 60000,
        env = bin.env{ HOME = state, SWITCHBOARD_STATE_DIR = state, BIN = BIN, POL = pol,
                       URL = server.url, SANDBOX_TOKEN = sb.TOKEN,
                       GH_TOKEN = "specs-own-token" }, -- no "no credential" note on cards
      })
      r = proc:wait()
      server:stop("TERM")
      server:wait()
    end)
    assert.is_false(r.timed_out, "the session did not end: " .. tostring(r.stderr))
    return r, sb.read(state .. "/out") or ""
  end

  local CONSOLE = [["$BIN" --policies "$POL" console --backend sandbox --sandbox-url "$URL"]]

  before_each(function()
    state = sb.tmpdir()
    pol = sb.policy_dir()
  end)
  after_each(function()
    if server and server.proc then pcall(server.stop, server, "KILL") end
    sb.rm(state)
    if server then sb.rm(server.root) end
    sb.cleanup()
  end)

  it("runs an ask, and a follow-up in the thread reuses its sandbox workspace; another thread does not", function()
    local r, out = session(CONSOLE .. [[ > out 2> err <<'EOF'
run `echo hi > marker.txt`
run `cat marker.txt`
/thread other
run `cat marker.txt`
agent:wizard run `ls`
EOF
echo "exit=$?" >> out]])
    assert.equal(0, r.exit, r.stderr)
    assert.matches("exit=0\n", out)
    assert.matches("^%[main%] agent:coding · sandbox\n%$ echo hi > marker.txt\n✓ exit 0 after [%d.]+s\n%(no output%)$",
      find_block(out, "echo hi"))
    assert.matches("^%[main%] agent:coding · sandbox\n%$ cat marker.txt\n✓ exit 0 after [%d.]+s\nhi$",
      find_block(out, "^%[main%][^\n]*\n%$ cat"))
    assert.matches("^%[other%] agent:coding · sandbox\n%$ cat marker.txt\n✗ exit 1 after [%d.]+s\n.*No such file",
      find_block(out, "^%[other%] agent"))
    assert.matches('^%[other%] There is no agent "wizard"%.\nAsk like this:\n', find_block(out, "wizard"))
    -- the commands ran in sandboxd's workspaces, none on the console's side
    assert.is_nil(sb.read(state .. "/workspaces"))
  end)

  it("gives a no-repository agent the null executor's legible error and provisions no sandbox", function()
    local r, out = session(CONSOLE .. [[ > out 2> err <<'EOF'
agent:general run `ls`
EOF
echo "exit=$?" >> out]])
    assert.equal(0, r.exit, r.stderr)
    assert.matches("^%[main%] agent:general · local\n%$ ls\n✗ not run\ntool bash needs a workspace, "
      .. "but agent general declares no repository", blocks(out)[1])
    assert.not_matches("POST /exec", server.log())
    assert.same({}, sb.thread_entries(server.root)) -- no instance was created
  end)

  it("stop drops the request at once; sandboxd kills the command's process group", function()
    local r, out = session([[
      mkfifo in
      ]] .. CONSOLE .. [[ < in > out 2> err & pid=$!
      exec 3> in
      echo 'run `sleep 60 & echo $! > '"$PWD"'/bg; echo $$ > '"$PWD"'/pid; wait`' >&3
      for i in $(seq 400); do [ -s bg ] && [ -s pid ] && break; sleep 0.05; done
      start=$(date +%s%N)
      echo stop >&3
      for i in $(seq 400); do grep -q 'stopped after' out && break; sleep 0.05; done
      echo "stop_to_card_ms=$(( ($(date +%s%N) - start) / 1000000 ))" >> out
      exec 3>&-
      wait $pid; echo "exit=$?" >> out
    ]], NO_WALLS)
    assert.equal(0, r.exit, r.stderr)
    assert.matches("exit=0\n", out)
    assert.matches("^%[main%] agent:coding · sandbox\n%$ sleep 60 & [^\n]*\n■ stopped after [%d.]+s — the "
      .. "command's process group was killed; the executor was released\n", blocks(out)[1])
    local ms = tonumber(out:match("stop_to_card_ms=(%d+)"))
    assert.is_true(ms < 30000, "the stop took " .. ms .. " ms to show") -- generous; the command runs 60 s
    -- sandboxd notices the dropped request at its next heartbeat (100 ms here)
    local leader, background = tonumber(sb.read(state .. "/pid")), tonumber(sb.read(state .. "/bg"))
    core.run(function()
      sb.wait_for(function() return not alive(leader) and not alive(background) end, 10000)
    end)
    assert.is_false(alive(leader), "the shell survived the stop")
    assert.is_false(alive(background), "the background job survived the stop")
  end)

  it("a full fleet reads as ⏳ Sandbox fleet busy, never as the command's exit", function()
    local r, out = session([[
      mkfifo in
      ]] .. CONSOLE .. [[ < in > out 2> err & pid=$!
      exec 3> in
      echo 'run `touch '"$PWD"'/a-started; sleep 6; echo a-done`' >&3
      for i in $(seq 400); do [ -f a-started ] && break; sleep 0.05; done
      echo '/thread b' >&3
      echo 'run `echo b-ran`' >&3
      exec 3>&-
      wait $pid; echo "exit=$?" >> out
    ]], { "--max-instances", "1", NO_WALLS[1] })
    assert.equal(0, r.exit, r.stderr)
    assert.matches("exit=0\n", out)
    local b = find_block(out, "^%[b%] agent")
    assert.matches("^%[b%] agent:coding · sandbox\n%$ echo b%-ran\n⏳ Sandbox fleet busy — no free per%-thread "
      .. "sandbox after waiting 3s", b)
    assert.not_matches("exit", b)
    assert.not_matches("\nb%-ran\n", "\n" .. b .. "\n") -- it never ran
    assert.matches("\n✓ exit 0 after 6%.%ds\na%-done$", find_block(out, "^%[main%] agent"))
  end)

  it("a sandboxd that dies under a command is a sandbox failure, not the command's exit", function()
    -- a walled instance sees no host path to signal through: the command is running once its
    -- unique sleep shows on the host (as walls.lua gh_token waits)
    local nap = ("sleep 30.%d"):format(string.unpack("<I3", core.crypto.random_bytes(3)) + 1000000)
    local r, out = session([[
      mkfifo in
      ]] .. CONSOLE .. [[ < in > out 2> err & pid=$!
      exec 3> in
      echo 'run `]] .. nap .. [[`' >&3
      for i in $(seq 600); do env -u LD_PRELOAD pgrep -f '^]] .. nap .. [[$' >/dev/null && break; sleep 0.05; done
      kill -KILL "$(cat sandboxd.pid)"
      exec 3>&-
      wait $pid; echo "exit=$?" >> out
    ]])
    assert.equal(0, r.exit, r.stderr)
    assert.matches("exit=0\n", out)
    local card = blocks(out)[1]
    assert.matches("^%[main%] agent:coding · sandbox\n%$ sleep 30%.%d+\n✗ sandbox failure after [%d.]+s — "
      .. "infrastructure, not the command's exit status\n", card)
    assert.not_matches("✗ exit", card)
  end)
end)
