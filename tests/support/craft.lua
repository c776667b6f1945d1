-- The world of the agent-craft specs (tests/e2e/agent_craft_spec.lua, agent_publish_spec.lua):
-- a bare repository acme/api served by the git stand-in (tests/support/git_standin.py, which
-- reads the tokens the GitHub stand-in mints), a `git` shim first on PATH that records every
-- git command line, and one console session with a GitHub App configured against the stand-ins.
--
--   local craft = require("support.craft")
--   local gitport = craft.setup(state, opts?)   before each test (state: a fresh directory;
--                                               opts.port_with: the git stand-in's port has them)
--   craft.teardown(state, m)                    after it
--   local H = {state = state, gitport = gitport}
--   craft.session(H, answers, lines, agents_edit?) → stdout, stderr, the model's requests, the
--       argv scan's leak (or nil), the scan count; H.m and H.w are the model and GitHub stand-ins
--   craft.remote(state, "git args"), craft.no_secret_anywhere(state, w, out, err, leak),
--   craft.push_files(state, {path = content}), craft.rg_barrier(state), craft.use(name, input),
--   craft.edit_then_say(extra_command?)
local core = require("switchboard.core")
local bin = require("support.bin")
local files = require("support.files")
local model = require("support.model")
local policies = require("support.policies")
local standin = require("support.github_standin")
local assert = require("luassert") -- busted's assert: a module does not see the spec's

local M = {}

local BIN = bin.path
if BIN:sub(1, 1) ~= "/" then BIN = os.getenv("PWD") .. "/" .. BIN end

function M.sh(cmd)
  local ok = os.execute(cmd)
  assert(ok, "failed: " .. cmd)
end

function M.cat(pattern)
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

M.all_argv = all_argv -- every process's argv (NUL-separated), keyed by pid

-- The pause after an argv scan that began at t0: a scan reads every /proc/<pid>/cmdline, tens of
-- ms beside a loaded suite; after a fixed short pause a scanning loop took most of a core, three
-- times the scan's own time keeps it under a quarter. At most half a second: a scan slowed to
-- seconds on a starved machine must not leave a whole (now fast) session unwatched.
function M.scan_pause(t0, floor_ms)
  core.sleep(math.min(500, math.max(floor_ms, 3 * (core.now_ms() - t0))))
end

function M.cjson_text(v) return require("cjson").encode(v) end

function M.count(text, plain)
  local n, pos = 0, 1
  while true do
    local i = text:find(plain, pos, true)
    if not i then return n end
    n, pos = n + 1, i + #plain
  end
end

M.BIG = ("Claude: keep functions small.\n"):rep(1200) -- 36,000 bytes: over max_file_bytes
local sh, cat = M.sh, M.cat

-- opts.port_with: the git stand-in listens on a port whose number contains these digits
function M.setup(state, opts)
  local gitport
  local port_with = opts and opts.port_with and (" --port-with " .. opts.port_with) or ""
  sh(("cd %s && mkdir -p repos/acme gitd shim && git init -q --bare repos/acme/api.git"
    .. " && git init -q src && cd src"
    .. " && printf 'Welcome to teh project.\\nSee teh docs.\\n' > README.md"
    .. " && printf 'AGENTS-MARKER: run make check before you finish.\\n' > AGENTS.md"
    .. " && printf '\\211PNG\\r\\n\\032\\n\\000\\000teh' > logo.png"
    .. " && git add . && git -c user.email=s@x -c user.name=s commit -qm init"
    .. " && git push -q ../repos/acme/api.git HEAD:refs/heads/main"
    .. " && git -C ../repos/acme/api.git symbolic-ref HEAD refs/heads/main"):format(state))
  local f = assert(io.open(state .. "/src/CLAUDE.md", "w"))
  f:write(M.BIG)
  f:close()
  sh(("cd %s/src && git add CLAUDE.md && git -c user.email=s@x -c user.name=s commit -qm claude"
    .. " && git push -q ../repos/acme/api.git HEAD:refs/heads/main"):format(state))
  local shim = state .. "/shim/git"
  f = assert(io.open(shim, "w"))
  f:write("#!/bin/sh\nprintf '%s\\n' \"$*\" >> '" .. state .. "/git-argv'\nexec /usr/bin/git \"$@\"\n")
  f:close()
  sh("chmod +x " .. shim)
  os.execute(("env -u LD_PRELOAD /usr/bin/python3 tests/support/git_standin.py --dir %s/gitd --root %s/repos --tokens-file %s/tokens%s >%s/gitd/out 2>&1 &")
    :format(state, state, state, port_with, state))
  core.run(function()
    gitport = model.wait_for(function() return files.read(state .. "/gitd/port") end, 180000) -- python3 on a loaded machine: the file ends the wait
  end)
  assert(gitport, "the git stand-in did not start: " .. (files.read(state .. "/gitd/out") or ""))
  return gitport
end

function M.teardown(state, m)
  if m then core.run(function() m.stop() end) end
  local pid = files.read(state .. "/gitd/pid")
  if pid then os.execute("kill -9 " .. pid .. " 2>/dev/null") end
  os.execute("rm -rf '" .. state .. "'")
  policies.cleanup()
end

-- One console session with the App configured; agents_edit changes policies/agents.lua.
-- → stdout, stderr, the model's requests, the argv scan's leak (or nil) and scan count
function M.session(H, answers, lines, agents_edit)
  local state, gitport = H.state, H.gitport
  local w, m
  local pol = policies.dir{
    -- the GitHub stand-in answers from this process's loop, which also scans every process's argv
    -- for a leak: beside a loaded suite a scan can hold it past the shipped 10 s
    github = function(src) return src .. '\nclone_url = "http://127.0.0.1:' .. gitport .. '/{repo}.git"\n'
      .. "request_timeout_ms = 60 * second\n" end,
    agents = agents_edit,
  }
  local r, reqs, leak, scans
  core.run(function()
    w = standin.world{ policy = function() return policies.shipped() end, real_clock = true,
                       tokens_file = state .. "/tokens", repos_root = state .. "/repos" }
    H.w = w
    local key_path = state .. "/app.pem"
    policies.write(key_path, w.priv)
    os.execute("chmod 600 '" .. key_path .. "'")
    m = model.start()
    H.m = m -- stopped by teardown even when this session fails
    m:script(answers)
    local env = bin.env{ HOME = state, SWITCHBOARD_STATE_DIR = state .. "/st", ANTHROPIC_BASE_URL = m.url,
                         ANTHROPIC_API_KEY = m.key, GITHUB_APP_ID = "12345",
                         GITHUB_APP_PRIVATE_KEY = key_path, GITHUB_API_URL = w.gh.api_url,
                         PATH = state .. "/shim:" .. os.getenv("PATH") }
    env.GH_TOKEN = nil
    -- 10 minutes rules out a session that hangs; a whole session of several runs took 7 on this
    -- machine at load 80, so a tighter bound would only measure the machine
    local proc = assert(core.spawn{ argv = { BIN, "--log-level", "debug", "--policies", pol, "console" },
                                    env = env, stdin = table.concat(lines, "\n") .. "\n", deadline_ms = 600000 })
    local done = false
    core.go(function() r = proc:wait(); done = true end)
    scans = 0
    while not done do
      local t0 = core.now_ms()
      for pid, args in pairs(all_argv()) do
        local found = w.leak(args)
        if found then leak = ("pid %d argv carries %s"):format(pid, found) end
      end
      scans = scans + 1
      M.scan_pause(t0, 10) -- git's argv is also recorded whole by the shim (no_secret_anywhere)
    end
    reqs = m:requests()
    w.close()
  end)
  assert.is_false(r.timed_out)
  return r.stdout, r.stderr, reqs, leak, scans
end

function M.remote(state, args)
  local p = io.popen(("git --git-dir=%s/repos/acme/api.git %s 2>&1"):format(state, args))
  local s = p:read("a")
  p:close()
  return s
end

function M.no_secret_anywhere(state, w, out, err, leak)
  assert.is_nil(leak)
  assert.is_nil(w.leak(out), "a card carries a secret")
  for line in err:gmatch("[^\n]+") do assert.is_nil(w.leak(line), "log line carries a secret: " .. line) end
  assert.is_nil(w.leak(cat(state .. "/st/workspaces/*/.git/config")), ".git/config carries a token")
  assert.is_nil(w.leak(files.read(state .. "/git-argv") or ""), "a git argv carries a token")
  assert.is_nil(w.leak(cat(state .. "/st/transcripts/*/*.jsonl")), "the transcript carries a token")
end

-- Files committed on main in the bare repository (path → content).
function M.push_files(state, list)
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
function M.rg_barrier(state)
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

function M.use(name, input) return { type = "tool_use", name = name, input = input } end
local use = M.use

-- A run that fixes the typo (and runs extra_command in the same turn), then says so: what the
-- publishing-failure specs publish.
function M.edit_then_say(extra_command)
  local first = { use("edit_file", { path = "README.md", old_text = "teh", new_text = "the", replace_all = true }) }
  if extra_command then first[#first + 1] = use("bash", { command = extra_command }) end
  return { { content = first }, { content = { { type = "text", text = "Fixed." } } } }
end

return M
