-- End to end (docs/contract.md#credentials): the real `switchboard` binary runs a `review` command with a
-- GitHub App configured against the loopback stand-in. The command sees GH_TOKEN equal to
-- the read token the stand-in minted, and while it runs no process's argv, no log line and no
-- span carries the token, the JWT or the private key.
--
-- It runs through a real `switchboard sandboxd` (the sandbox executor carries the token in the
-- /exec body; sandboxd hands it to the command's envp) and through the local executor.
local core = require("switchboard.core")
local async = require("support.async")
local tmp = require("support.tmp")
local bin = require("support.bin")
local P = require("support.policies")
local standin = require("support.github_standin")

local function sha256_hex(s) return core.crypto.hex(core.crypto.sha256(s)) end

local function slurp(path)
  local f = io.open(path, "rb")
  if not f then return nil end
  local s = f:read("a")
  f:close()
  return s
end

local all_argv = require("support.craft").all_argv

-- Starts `switchboard sandboxd` on a free loopback port; → process, url, its stderr chunks.
local function start_sandboxd(dir, token)
  local chunks, port = {}, nil
  -- a scratch copy of the shipped policies: outbound through pasta, never a bridge in the host's
  -- own network namespace (support/policies.lua)
  local p = bin.start({ "--policies", P.dir(), "--log-format", "json", "--log-level", "debug", "sandboxd",
    "--listen", "127.0.0.1:0", "--root", dir .. "/sandboxes" }, {
    env = { SANDBOX_TOKEN = token, SWITCHBOARD_STATE_DIR = dir .. "/state" },
    on_output = function(stream, chunk) if stream == "stderr" then chunks[#chunks + 1] = chunk end end,
  })
  local t0 = core.now_ms()
  while port == nil and core.now_ms() - t0 < 10000 do
    port = table.concat(chunks):match('"event":"sandboxd.listening"[^\n]-"port":(%d+)')
    if port == nil then core.sleep(20) end
  end
  assert(port, "sandboxd did not start: " .. table.concat(chunks))
  return p, "http://127.0.0.1:" .. port, chunks
end

describe("github identity end to end (switchboard exec, agent review)", function()
  local dir
  before_each(function() dir = tmp.dir("gh-e2e") end)
  after_each(function() tmp.remove_all() end)

  -- Runs one review command on backend ("sandbox": through a real sandboxd; "local") and
  -- checks everything the contract asks of the run.
  local function review_run(backend)
    local w = standin.world({ policy = function() return P.shipped() end, real_clock = true })
    local key_path = dir .. "/app.pem"
    P.write(key_path, w.priv)
    os.execute("chmod 600 '" .. key_path .. "'")
    local trace = dir .. "/spans.jsonl"
    local stderr = {}
    local sandboxd, sandbox_args, sandboxd_log = nil, {}, {}
    local sandbox_token = core.crypto.hex(core.crypto.random_bytes(16))
    if backend == "sandbox" then
      local url
      sandboxd, url, sandboxd_log = start_sandboxd(dir, sandbox_token)
      sandbox_args = { "--backend", "sandbox", "--sandbox-url", url }
    else
      sandbox_args = { "--backend", "local", "--workspace-root", dir .. "/ws" }
    end
    -- The command shows the hash of the token it got and keeps its shell alive long enough
    -- for the argv scan to see it (the trailing builtin stops bash from exec'ing sleep).
    -- 4 s: a scan of every process's argv can take hundreds of ms on a loaded machine.
    local command = [[printf %s "$GH_TOKEN" | sha256sum | cut -c1-64; sleep 4; exit 0]]
    local argv = { "--log-format", "json", "--log-level", "debug", "exec", "--thread", "review-1",
      "--agent", "review", "--repo", "acme/api", "--trace", trace }
    for _, a in ipairs(sandbox_args) do argv[#argv + 1] = a end
    argv[#argv + 1] = "--"
    argv[#argv + 1] = command
    local p = bin.start(argv, {
      env = { GITHUB_APP_ID = "12345", GITHUB_APP_PRIVATE_KEY = key_path,
              GITHUB_API_URL = w.gh.api_url, SWITCHBOARD_STATE_DIR = dir .. "/state",
              SANDBOX_TOKEN = sandbox_token },
      deadline_ms = 60000,
      on_output = function(stream, chunk) if stream == "stderr" then stderr[#stderr + 1] = chunk end end,
    })

    -- Scan every process's argv until the run ends; remember whether the command was seen.
    local scans, saw_command, argv_leak, environ_has_token = 0, 0, nil, false
    local done = false
    local result
    core.go(function() result = p:wait(); done = true end)
    while not done do
      local t0 = core.now_ms()
      for pid, args in pairs(all_argv()) do
        local leak = w.leak(args)
        if leak then argv_leak = ("pid %d argv carries %s"):format(pid, leak) end
        if args:find("sha256sum", 1, true) and args:find("^[^%z]*bash%z") then
          saw_command = saw_command + 1
          -- The token is in the command's environment (envp), which is how it must arrive.
          local environ = slurp("/proc/" .. pid .. "/environ") or ""
          for token in pairs(w.gh.tokens) do
            if environ:find("GH_TOKEN=" .. token, 1, true) then environ_has_token = true end
          end
        end
      end
      scans = scans + 1
      require("support.craft").scan_pause(t0, 20)
    end
    if sandboxd then
      sandboxd:kill("TERM")
      sandboxd:wait()
    end

    local logs = table.concat(stderr)
    assert.equal(0, result.exit, result.stdout .. logs)
    assert.is_true(saw_command >= 1, ("the argv scan saw the command running in %d of %d scans"):format(saw_command, scans))
    assert.is_nil(argv_leak)
    assert.is_true(environ_has_token, "GH_TOKEN was not in the command's environment")

    -- The command saw exactly the read token the stand-in minted, and nothing else was minted.
    assert.equal(1, w.gh:mints_for("read"))
    assert.equal(0, w.gh:mints_for("write"))
    assert.equal(1, #w.gh.mints)
    assert.equal(sha256_hex(w.gh.mints[1].token), result.stdout:match("^(%x+)"))
    assert.same({}, w.gh.violations)
    assert.is_true(#w.gh.jwts >= 1)

    -- Logs (the bot's and sandboxd's): the mint is logged by scope, installation and expiry,
    -- and no line carries a secret.
    local minted = false
    for line in logs:gmatch("[^\n]+") do
      assert.is_nil(w.leak(line), "log line carries a secret: " .. line)
      if line:find('"event":"github.token_minted"', 1, true) then
        minted = true
        assert.matches('"scope":"read"', line)
        assert.matches('"installation":678', line)
      end
    end
    assert.is_true(minted, "no github.token_minted line in:\n" .. logs)
    local server_logs = table.concat(sandboxd_log)
    if backend == "sandbox" then assert.matches('"event":"sandboxd.listening"', server_logs) end
    for line in server_logs:gmatch("[^\n]+") do
      assert.is_nil(w.leak(line), "sandboxd log line carries a secret: " .. line)
    end

    -- Spans: the exec span is there, names the backend and carries no secret.
    local spans = assert(slurp(trace))
    assert.matches('"name":"exec.exec"', spans)
    assert.matches('"backend":"' .. backend .. '"', spans)
    assert.is_nil(w.leak(spans))
    w.close()
  end

  it("in the sandbox, the review command sees GH_TOKEN = the minted read token; no token, JWT or key in any argv, log line or span",
    async(function() review_run("sandbox") end))

  it("on the local executor, the same", async(function() review_run("local") end))

  it("a repository the App does not cover fails the command legibly, and the failure quotes no secret",
    async(function()
      local w = standin.world({ policy = function() return P.shipped() end, real_clock = true })
      local r = bin.run({ "--log-format", "json", "--log-level", "debug", "exec",
        "--workspace-root", dir .. "/ws", "--agent", "review", "--repo", "acme/elsewhere",
        "--", "echo must-not-run" }, {
        env = { GITHUB_APP_ID = "12345", GITHUB_APP_PRIVATE_KEY = w.priv,
                GITHUB_API_URL = w.gh.api_url, SWITCHBOARD_STATE_DIR = dir .. "/state" },
      })
      assert.equal(125, r.exit)
      assert.equal("", r.stdout)
      assert.matches("GitHub credentials don't have access to acme/elsewhere — ", r.stderr, 1, true)
      assert.is_nil(w.leak(r.stderr))
      assert.equal(0, #w.gh.mints)
      w.close()
    end))
end)
