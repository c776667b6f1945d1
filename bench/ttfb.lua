-- From the ask to the first byte of the model request (issue 36): how long a person waits
-- before the model is even asked. Measured through `switchboard console` as a black box (the
-- real binary, the shipped policies, the local backend), with the Messages API stand-in
-- (tests/support/model_standin.py) and, for a repository, the git stand-in
-- (tests/support/git_standin.py) on loopback:
--
--   warm           a follow-up in a thread whose earlier ask has run (2nd, 3rd, … ask)
--   warm_restart   the first ask in such a thread after the console was restarted (the
--                  conversation comes back from the thread's record), written once the new
--                  console has started
--   cold_repo      the first ask of a new thread that names a repository (the clone, the
--                  instruction files, the run's facts)
--   cold           the first ask of a new thread without a repository
--
-- The ask's time is taken right after its line is written to the console's stdin (a FIFO);
-- the request's is the stand-in's CLOCK_MONOTONIC when the request's body was read (both
-- clocks are CLOCK_MONOTONIC: libuv's hrtime and Python's time.monotonic). Each answer is a
-- one-line text, so each ask is one request; the next ask is written once the card has ended.
-- The same run reports, from the stand-in's own usage accounting, the share of a warm
-- follow-up's input tokens read from the prompt cache. Load: /proc/loadavg before and after.
--
--   lua5.4 bench/ttfb.lua [warm=12] [restarts=4] [colds=6]      (SB_BUILD_DIR: another build)
--
-- The last line is JSON: {scenarios = {name = {n, p50_ms, p95_ms, max_ms}}, cached_share, load}.
local build = os.getenv("SB_BUILD_DIR") or "./build"
package.path = "./lua/?.lua;./lua/?/init.lua;./tests/lua/?.lua;./tests/?.lua;" .. package.path
package.cpath = build .. "/lua/?.so;" .. package.cpath

local core = require("switchboard.core")
local cjson = require("cjson")
local model = require("support.model")
local files = require("support.files")
local policies = require("support.policies")

local WARM, RESTARTS, COLDS = tonumber(arg[1] or 12), tonumber(arg[2] or 4), tonumber(arg[3] or 6)
local SL = require("support.slack")

local BIN = os.getenv("SWITCHBOARD_BIN") or (build .. "/switchboard")
if BIN:sub(1, 1) ~= "/" then BIN = os.getenv("PWD") .. "/" .. BIN end

local function sh(cmd) assert(os.execute(cmd), "failed: " .. cmd) end

local function load_now()
  local s = files.read("/proc/loadavg") or "?"
  return tonumber(s:match("^(%S+)")) or 0
end

local function percentile(xs, p)
  local s = {}
  for i, x in ipairs(xs) do s[i] = x end
  table.sort(s)
  if #s == 0 then return nil end
  return s[math.max(1, math.ceil(#s * p / 100))]
end

-- A bare repository acme/api (a README and an AGENTS.md) behind the git stand-in.
local function git_server(dir, token)
  sh(("cd %s && mkdir -p repos/acme gitd && git init -q --bare repos/acme/api.git"
    .. " && git init -q src && cd src && echo 'hello from acme' > README && echo 'Run make test.' > AGENTS.md"
    .. " && git add README AGENTS.md && git -c user.email=s@x -c user.name=s commit -qm init"
    .. " && git push -q ../repos/acme/api.git HEAD:refs/heads/main"
    .. " && git -C ../repos/acme/api.git symbolic-ref HEAD refs/heads/main"):format(dir))
  os.execute(("/usr/bin/python3 tests/support/git_standin.py --dir %s/gitd --root %s/repos --token %s >%s/gitd/out 2>&1 &")
    :format(dir, dir, token, dir))
  local port = model.wait_for(function() return files.read(dir .. "/gitd/port") end, 180000)
  assert(port, "the git stand-in did not start")
  return port
end

-- One console session: its stdin a FIFO the bench writes asks into, its stdout a file.
local function console(dir, env, pol)
  local fifo = dir .. "/in-" .. tostring(core.now_ms()):gsub("%.", "")
  sh("mkfifo " .. fifo)
  local out = fifo .. ".out"
  local e = { BIN = BIN, POL = pol, FIFO = fifo, OUT = out }
  for k, v in pairs(env) do e[k] = v end
  local proc = assert(core.spawn{ argv = { "bash", "-c", 'exec "$BIN" --policies "$POL" console <"$FIFO" >"$OUT" 2>"$OUT.err"' },
    env = e, deadline_ms = 600000 })
  local w = assert(io.open(fifo, "w")) -- waits for the console's shell to open it
  w:setvbuf("no")
  return { proc = proc, w = w, out = out, fifo = fifo }
end

local function ended_cards(c)
  local s = files.read(c.out) or ""
  local n = 0
  -- a card is printed once, when it has ended: its first line names the thread and the agent
  for _ in ("\n" .. s):gmatch("\n%[[^%]\n]+%] agent:") do n = n + 1 end
  return n, s
end

-- Writes one ask and returns ms from the ask to the model's request; waits for the card's end.
local function ask(c, m, line, seen)
  local before = #m:requests()
  local ended = ended_cards(c)
  -- the ask's time before the write, as slack_ask's before the envelope: taken after it, a bench
  -- descheduled between the two could see the console reach the model first (-0.7 ms at load 12)
  local t_ask = core.now_ms()
  c.w:write(line .. "\n")
  local reqs = model.wait_for(function()
    local r = m:requests()
    return #r > before and r
  end, 120000)
  assert(reqs, "no model request for: " .. line .. "\n" .. select(2, ended_cards(c)))
  local t_req = reqs[before + 1].t * 1000
  assert(model.wait_for(function() return ended_cards(c) > ended end, 120000),
    "the card did not end: " .. line)
  seen[#seen + 1] = reqs[before + 1]
  return t_req - t_ask
end

-- The Slack front: one mention (or a reply in a thread) pushed over Socket Mode by the Slack
-- stand-in (tests/support/slack_standin.py); the ask's time is taken before the stand-in is
-- told to send it. Waits for the card's final state.
local slack_seq = 0
local function slack_ask(st, m, text, root)
  slack_seq = slack_seq + 1
  local ts = ("1700001%03d.000100"):format(slack_seq)
  local before = #m:requests()
  local t_ask = core.now_ms()
  st:envelope("events_api", SL.mention{ ts = ts, thread_ts = root, text = text })
  local reqs = model.wait_for(function()
    local r = m:requests()
    return #r > before and r
  end, 120000)
  assert(reqs, "no model request for the Slack ask: " .. text)
  local thread = root or ts
  assert(model.wait_for(function()
    for _, c in ipairs(st:cards(thread)) do
      if SL.is_final(c) and SL.card_text(c):find(text:gsub("^agent:%S+ ", ""), 1, true) then return true end
    end
  end, 120000), "the Slack card did not end: " .. text)
  return reqs[before + 1].t * 1000 - t_ask, ts
end

local function close(c)
  c.w:close()
  local r = c.proc:wait()
  os.remove(c.fifo)
  return r
end

local function main()
  local dir = files.tmpdir()
  local token = "ghs_bench" .. core.crypto.hex(core.crypto.random_bytes(16))
  local port = git_server(dir, token)
  local pol = policies.dir{
    github = function(src) return src .. '\nclone_url = "http://127.0.0.1:' .. port .. '/{repo}.git"\n' end,
  }
  local m = model.start()
  m:config{ min_cache_tokens = 1024 } -- the API's minimum cacheable prompt for the shipped model (Sonnet)
  local env = { PATH = os.getenv("PATH"), HOME = dir, LANG = os.getenv("LANG"),
                ASAN_OPTIONS = os.getenv("ASAN_OPTIONS"), UBSAN_OPTIONS = os.getenv("UBSAN_OPTIONS"),
                SWITCHBOARD_LUA_DIR = os.getenv("SWITCHBOARD_LUA_DIR"),
                SWITCHBOARD_STATE_DIR = dir .. "/state", ANTHROPIC_BASE_URL = m.url,
                ANTHROPIC_API_KEY = m.key, GH_TOKEN = token,
                -- a pull request is refused at once (nothing listens there): the card ends
                GITHUB_API_URL = "http://127.0.0.1:9" }
  local load0 = load_now()
  local times = { warm = {}, warm_restart = {}, cold_repo = {}, cold = {},
                  slack_warm = {}, slack_warm_restart = {}, slack_cold_repo = {}, slack_cold = {} }
  local seen = {}
  local shares = {}

  -- warm: one thread with a repository, asked again and again
  local c = console(dir, env, pol)
  c.w:write("/thread warm\n")
  ask(c, m, "agent:coding what does the README in acme/api say?", seen)
  for i = 1, WARM do
    -- each run changes a file, as a coding agent's runs do: the workspace's `git status` moves
    m:script{ { content = { { type = "tool_use", name = "write_file", input = { path = "notes-" .. i .. ".txt", content = "note\n" } } } },
              { content = { { type = "text", text = "Noted." } } } }
    times.warm[#times.warm + 1] = ask(c, m, "agent:coding and now, question " .. i .. "?", seen)
    local u = seen[#seen].usage
    local total = u.input_tokens + u.cache_read_input_tokens + u.cache_creation_input_tokens
    shares[#shares + 1] = total > 0 and u.cache_read_input_tokens / total or 0
  end
  -- cold: new threads, with and without a repository
  for i = 1, COLDS do
    c.w:write("/thread cold-repo-" .. i .. "\n")
    times.cold_repo[#times.cold_repo + 1] = ask(c, m, "agent:coding what does the README in acme/api say?", seen)
    c.w:write("/thread cold-" .. i .. "\n")
    times.cold[#times.cold + 1] = ask(c, m, "agent:coding what is 2 + 2?", seen)
  end
  close(c)
  -- warm after a restart: the thread's conversation comes back from the record; the ask is
  -- written once the console is up (it has answered /thread), as a bot is before its asks
  for i = 1, RESTARTS do
    c = console(dir, env, pol)
    c.w:write("/thread warm\n")
    assert(model.wait_for(function() return (files.read(c.out) or ""):find("thread: warm", 1, true) end, 120000),
      "the console did not start")
    times.warm_restart[#times.warm_restart + 1] = ask(c, m, "agent:coding after restart " .. i .. "?", seen)
    close(c)
  end

  -- the same through the Slack front
  local st = SL.standin()
  local benv = {}
  for _, k in ipairs({ "ANTHROPIC_BASE_URL", "ANTHROPIC_API_KEY", "GH_TOKEN", "GITHUB_API_URL" }) do benv[k] = env[k] end
  local sdir = dir .. "/slack-state"
  local bot = SL.bot(st, { state_dir = sdir, policies = pol, env = benv })
  local _, root = slack_ask(st, m, "agent:coding what does the README in acme/api say?")
  for i = 1, WARM do
    m:script{ { content = { { type = "tool_use", name = "write_file", input = { path = "slack-" .. i .. ".txt", content = "note\n" } } } },
              { content = { { type = "text", text = "Noted." } } } }
    times.slack_warm[#times.slack_warm + 1] = slack_ask(st, m, "agent:coding slack question " .. i .. "?", root)
  end
  for i = 1, COLDS do
    times.slack_cold_repo[#times.slack_cold_repo + 1] = slack_ask(st, m, "agent:coding what does the README in acme/api say, " .. i .. "?")
    times.slack_cold[#times.slack_cold + 1] = slack_ask(st, m, "agent:coding what is " .. i .. " + 2?")
  end
  for i = 1, RESTARTS do
    bot:signal("TERM")
    bot:wait()
    bot = SL.bot(st, { state_dir = sdir, policies = pol, env = benv })
    times.slack_warm_restart[#times.slack_warm_restart + 1] = slack_ask(st, m, "agent:coding slack after restart " .. i .. "?", root)
  end
  bot:signal("TERM")
  bot:wait()
  st:close()

  local load1 = load_now()

  local result = { scenarios = {}, load = { before = load0, after = load1 },
                   cached_share = { p50 = percentile(shares, 50), min = percentile(shares, 0) } }
  print(("%-18s %4s %10s %10s %10s"):format("scenario", "n", "p50 ms", "p95 ms", "max ms"))
  for _, name in ipairs({ "warm", "warm_restart", "cold_repo", "cold",
                          "slack_warm", "slack_warm_restart", "slack_cold_repo", "slack_cold" }) do
    local xs = times[name]
    local r = { n = #xs, p50_ms = percentile(xs, 50), p95_ms = percentile(xs, 95), max_ms = percentile(xs, 100) }
    result.scenarios[name] = r
    print(("%-18s %4d %10.1f %10.1f %10.1f"):format(name, r.n, r.p50_ms or 0, r.p95_ms or 0, r.max_ms or 0))
  end
  print(("cached share of a warm follow-up's input tokens: p50 %.1f %%, lowest %.1f %%"):format(
    100 * (result.cached_share.p50 or 0), 100 * (result.cached_share.min or 0)))
  print(("load average: %.2f before, %.2f after"):format(load0, load1))
  print(cjson.encode(result))

  m.stop()
  local pid = files.read(dir .. "/gitd/pid")
  if pid then os.execute("kill -9 " .. pid .. " 2>/dev/null") end
  os.execute("rm -rf '" .. dir .. "'")
  policies.cleanup()
end

local ok, err
core.run(function() ok, err = xpcall(main, debug.traceback) end)
if not ok then
  io.stderr:write(tostring(err) .. "\n")
  os.exit(1)
end
