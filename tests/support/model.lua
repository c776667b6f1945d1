-- The model stand-in (tests/support/model_standin.py) from specs. Call inside core.run.
--   local m = model.start()          m.url, m.key
--   m:script{answer, …}              queue the answers (see the stand-in's header)
--   m:config{max_prompt_tokens = N}  the stand-in's limits
--   m:requests()                     [{headers, body, bytes, status, usage, error}] as received
--   m:stop()
local core = require("switchboard.core")
local cjson = require("cjson")
local files = require("support.files")

local M = {}

local function wait_for(pred, ms)
  local t0 = core.now_ms()
  local v = pred()
  while not v and core.now_ms() - t0 < ms do
    core.sleep(20)
    v = pred()
  end
  return v
end
M.wait_for = wait_for

function M.start(opts)
  opts = opts or {}
  local dir = files.tmpdir()
  local key = opts.key or ("sk-ant-spec-" .. core.crypto.hex(core.crypto.random_bytes(12)))
  -- --watch: the stand-in ends when this process does, even if a spec failed before its teardown
  -- opts.standin: another provider's stand-in with the same control routes (chat_standin.py)
  os.execute(("/usr/bin/python3 %s %s --dir %s --key %s --watch %d >%s/log 2>&1 &")
    :format(opts.standin or "tests/support/model_standin.py", opts.args or "", dir, key, require("support.procs").self_pid(), dir))
  local port = wait_for(function() return files.read(dir .. "/port") end, 180000) -- python3 on a loaded machine (over 60 s seen): the file ends the wait
  assert(port, "the model stand-in did not start: " .. (files.read(dir .. "/log") or ""))
  local h = { dir = dir, key = key, port = tonumber(port), pid = tonumber(files.read(dir .. "/pid")) }
  h.url = "http://127.0.0.1:" .. h.port
  function h.script(_, answers)
    local status = core.http.request{ method = "PUT", url = h.url .. "/_script",
      body = cjson.encode(answers), deadline_ms = 30000 } -- a bound for a loaded machine
    assert(status == 200, "the model stand-in refused the script")
  end
  function h.config(_, cfg)
    local status = core.http.request{ method = "PUT", url = h.url .. "/_config",
      body = cjson.encode(cfg), deadline_ms = 5000 }
    assert(status == 200, "the model stand-in refused the config")
  end
  function h.requests()
    local status, _, body = core.http.request{ method = "GET", url = h.url .. "/_requests", deadline_ms = 30000 } -- a bound for a loaded machine
    assert(status == 200)
    return cjson.decode(body)
  end
  function h.stop()
    os.execute("kill -9 " .. h.pid .. " 2>/dev/null")
    os.execute("rm -rf '" .. dir .. "'")
  end
  return h
end

-- One black-box session against a stand-in, the shape the provider and long-run specs share.
-- Call outside core.run. Starts the stand-in (o.start: M.start's options) and hands it to
-- o.started(m) at once (the spec's after_each stops it even if the session fails), runs
-- o.before(m) if given, scripts `answers`, spawns o.spawn(m) (core.spawn's options) and waits.
-- Returns the process's result and the requests the stand-in got.
function M.session(answers, o)
  local r, reqs
  core.run(function()
    local m = M.start(o.start)
    if o.started then o.started(m) end
    if o.before then o.before(m) end
    m:script(answers)
    local proc = assert(core.spawn(o.spawn(m)))
    r = proc:wait()
    reqs = m:requests()
  end)
  return r, reqs
end

-- core.spawn's options for `switchboard console` reading `line`, with the environment `env`
-- (bin.env's, ANTHROPIC_API_KEY unset, then `extra` applied: false unsets).
function M.console_spawn(binary, pol, line, env, extra)
  env = require("support.bin").env(env)
  env.ANTHROPIC_API_KEY = nil
  for k, v in pairs(extra or {}) do env[k] = v or nil end
  return { argv = { binary, "--policies", pol, "console" }, env = env, stdin = line .. "\n", deadline_ms = 120000 }
end

-- The tool_result blocks of a request's last message, in order.
function M.tool_results(request)
  local msgs = request.body.messages
  local last = msgs[#msgs]
  local out = {}
  if type(last.content) == "table" then
    for _, b in ipairs(last.content) do
      if b.type == "tool_result" then out[#out + 1] = b end
    end
  end
  return out
end

-- The text of a message: its string content, or its text blocks joined.
function M.text_of(message)
  if type(message.content) == "string" then return message.content end
  local out = {}
  for _, b in ipairs(message.content) do
    if b.type == "text" then out[#out + 1] = b.text end
  end
  return table.concat(out, "\n")
end

-- The text of a user message without the run's facts that open a run's ask (policies/agents.lua
-- environment.turn: "[This run: …]").
function M.ask_of(message)
  local t = M.text_of(message)
  return (t:gsub("^%[This run: .-%]\n\n?", ""))
end

-- The system prompt of a request body: a string, or its text blocks joined (the run sends
-- blocks, the last with a cache breakpoint).
function M.system_text(body)
  if type(body.system) ~= "table" then return body.system end
  return M.text_of{ content = body.system }
end

-- The names of the tools a request offered.
function M.tool_names(request)
  local out = {}
  for _, t in ipairs(request.body.tools or {}) do out[#out + 1] = t.name end
  return out
end

return M
