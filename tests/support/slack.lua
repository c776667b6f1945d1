-- The Slack stand-in (tests/support/slack_standin.py) and `switchboard slack` for specs.
--
--   local st = SL.standin()                 a fresh stand-in: st.url (the Web API base)
--   local bot = SL.bot(st, {args = {…}, env = {…}, policies = dir})   waits for slack.ready
--   st:envelope("events_api", SL.mention{ts = "1.1", text = "run `ls`"})
--   SL.wait(function() return … end, "what we wait for")            polls with a deadline
--   bot:signal("TERM"); bot:wait()
local core = require("switchboard.core")
local cjson = require("cjson")
local bin = require("support.bin")

local M = {}

M.BOT_TOKEN = "xoxb-1111-2222-standinbotsecret"
M.APP_TOKEN = "xapp-1-A0APP-3333-standinappsecret"
M.SIGNING_SECRET = "8f742231b10e8888abcd99yyyzzz85a5"
M.TEAM, M.BOT_USER = "T0ACME", "U0BOT"
M.PYTHON = "/usr/bin/python3" -- Debian's, which has python3-websockets

local WAIT_MS = 30000 -- generous: the machine is shared

function M.wait(fn, what, ms)
  local deadline = core.now_ms() + (ms or WAIT_MS)
  while true do
    local v = fn()
    if v then return v end
    if core.now_ms() > deadline then error("timed out waiting for " .. tostring(what), 2) end
    core.sleep(25)
  end
end

local Standin = {}
Standin.__index = Standin

function M.standin()
  local self = setmetatable({ out = "" }, Standin)
  self.proc = assert(core.spawn{
    -- --watch: it ends when this process does, even if a spec failed before its teardown
    argv = { M.PYTHON, "tests/support/slack_standin.py", "--watch", tostring(require("support.procs").self_pid()) },
    env = { PATH = "/usr/bin:/bin", SLACK_BOT_TOKEN = M.BOT_TOKEN, SLACK_APP_TOKEN = M.APP_TOKEN },
    on_output = function(stream, chunk) if stream == "stdout" then self.out = self.out .. chunk end end,
  })
  M.wait(function() return self.out:match("READY (%d+)") end, "the Slack stand-in to listen")
  self.port = tonumber(self.out:match("READY (%d+)"))
  self.url = ("http://127.0.0.1:%d/api"):format(self.port)
  return self
end

function Standin:control(path, body)
  local status, _, answer = core.http.request{
    method = body and "POST" or "GET", url = ("http://127.0.0.1:%d/_control/%s"):format(self.port, path),
    body = body and cjson.encode(body) or nil, deadline_ms = 10000,
    headers = { ["content-type"] = "application/json" },
  }
  assert(status, "the stand-in's control API did not answer")
  return status, cjson.decode(answer)
end

function Standin:state()
  local _, s = self:control("state")
  return s
end

function Standin:envelope(kind, payload, extra)
  local body = { type = kind, payload = payload }
  for k, v in pairs(extra or {}) do body[k] = v end
  local status, answer = self:control("envelope", body)
  assert(status == 200, "envelope not sent: " .. tostring(answer.error))
  return answer
end

-- Slack's own delivery of an event (the stand-in's /_control/event): on one of the open
-- connections in turn, sent again while it is not acked. → the delivery's id
function Standin:event(kind, payload)
  local status, answer = self:control("event", { type = kind, payload = payload })
  assert(status == 200, "event not taken: " .. tostring(answer.error))
  return answer.delivery
end

function Standin:calls(method)
  local out = {}
  for _, c in ipairs(self:state().calls) do
    if method == nil or c.method == method then out[#out + 1] = c end
  end
  return out
end

-- The card messages posted in a thread (by its root ts), oldest first, as the stand-in keeps them.
function Standin:cards(thread_ts)
  local out = {}
  for ts, m in pairs(self:state().messages) do
    if m.thread_ts == thread_ts and m.blocks ~= cjson.null and m.blocks ~= nil then
      m.ts = ts
      out[#out + 1] = m
    end
  end
  table.sort(out, function(a, b) return tonumber(a.ts) < tonumber(b.ts) end)
  return out
end

-- Plain answers (no blocks) posted in a thread.
function Standin:answers(thread_ts)
  local out = {}
  for _, m in pairs(self:state().messages) do
    if m.thread_ts == thread_ts and (m.blocks == cjson.null or m.blocks == nil) then out[#out + 1] = m.text end
  end
  return out
end

function Standin:close()
  self.proc:kill("KILL")
  self.proc:wait()
end

-- All text of a card message: its blocks' texts joined by newlines (a link button as
-- "[TEXT] URL").
function M.card_text(m)
  local parts = {}
  for _, b in ipairs(m.blocks or {}) do
    if type(b.text) == "table" then parts[#parts + 1] = b.text.text end
    for _, e in ipairs(b.elements or {}) do
      if e.type == "mrkdwn" then parts[#parts + 1] = e.text end
      if e.type == "button" then parts[#parts + 1] = "[" .. e.text.text .. "]" .. (e.url and (" " .. e.url) or "") end
    end
  end
  return table.concat(parts, "\n")
end

function M.is_final(m)
  return not M.card_text(m):find("[Stop]", 1, true)
end

-- The text of the first final card in a thread (with `has` in it, when given), waited for.
function M.final_card(st, thread_ts, ms, has)
  return M.wait(function()
    for _, c in ipairs(st:cards(thread_ts)) do
      local t = M.is_final(c) and M.card_text(c)
      if t and (not has or t:find(has, 1, true)) then return t end
    end
  end, "the final card" .. (has and (" with " .. has) or ""), ms)
end

-- A completed upload whose title has `title`, waited for.
function M.upload_titled(st, title, ms)
  return M.wait(function()
    for _, up in pairs(st:state().uploads or {}) do
      if up.completed and tostring(up.title):find(title, 1, true) then return up end
    end
  end, "the upload " .. title, ms)
end

local seq = 0
-- An app_mention event_callback. f: ts, thread_ts?, text, user?, channel?, event_id?, team?
function M.mention(f)
  seq = seq + 1
  return {
    type = "event_callback", team_id = f.team or M.TEAM, api_app_id = "A0APP",
    event_id = f.event_id or ("Ev" .. tostring(core.now_ms()):gsub("%.", "") .. seq),
    event_time = math.floor(core.wall_ms() / 1000),
    event = {
      type = f.type or "app_mention", user = f.user or "U0ANA", channel = f.channel or "C0GEN",
      ts = f.ts, thread_ts = f.thread_ts, text = "<@" .. M.BOT_USER .. "> " .. f.text,
      channel_type = f.channel_type, subtype = f.subtype, bot_id = f.bot_id,
    },
  }
end

-- A Stop button press in a thread.
function M.stop_press(thread_ts, f)
  f = f or {}
  local channel = f.channel or "C0GEN"
  return {
    type = "block_actions", team = { id = M.TEAM }, user = { id = f.user or "U0ANA", team_id = M.TEAM },
    channel = { id = channel }, message = { ts = f.card_ts, thread_ts = thread_ts },
    actions = { { action_id = "switchboard_stop", type = "button",
                  value = ("%s/%s/%s"):format(M.TEAM, channel, thread_ts) } },
  }
end

-- Signs an Events API request body the way Slack does.
function M.sign(body, ts, secret)
  ts = ts or tostring(math.floor(core.wall_ms() / 1000))
  local mac = core.crypto.hex(core.crypto.hmac_sha256(secret or M.SIGNING_SECRET, "v0:" .. ts .. ":" .. body))
  return { ["x-slack-request-timestamp"] = ts, ["x-slack-signature"] = "v0=" .. mac }
end

local Bot = {}
Bot.__index = Bot

-- The Slack front's own behaviour is what these specs test, not the walls (tests/e2e/
-- slack_walls_spec.lua and deploy/tests/package_systemd.sh test those): unless opts.walled, the bot
-- runs its commands unwalled — local_walls.slack = false and --allow-unwalled-commands.
local function unwalled_policies(dir)
  dir = dir or require("support.policies").dir()
  local f = assert(io.open(dir .. "/isolation.lua", "a"))
  f:write("\n-- tests/support/slack.lua: the front is tested here, not the walls\nlocal_walls.slack = false\n")
  f:close()
  return dir
end

-- opts: args (after `slack`), env (extra; a value false removes), policies (dir), state_dir,
-- walled (true: the shipped walls, no --allow-unwalled-commands)
-- A spec's teardown: a bot still running is killed and reaped (nil or an ended bot: nothing).
function M.kill_bot(bot)
  if bot and not bot.result then
    bot:signal("KILL")
    bot:wait()
  end
end

function M.bot(st, opts)
  opts = opts or {}
  if not opts.walled then
    opts.policies = unwalled_policies(opts.policies)
    local args = { "--allow-unwalled-commands" }
    for _, a in ipairs(opts.args or {}) do args[#args + 1] = a end
    opts.args = args
  end
  local env = {
    SLACK_BOT_TOKEN = M.BOT_TOKEN, SLACK_APP_TOKEN = M.APP_TOKEN, SLACK_API_URL = st.url,
    SWITCHBOARD_STATE_DIR = opts.state_dir, SWITCHBOARD_POLICIES = opts.policies,
  }
  for k, v in pairs(opts.env or {}) do env[k] = v or nil end
  local self = setmetatable({ err = "", out = "", state_dir = opts.state_dir }, Bot)
  local argv = { "--log-level", "debug", "slack" }
  for _, a in ipairs(opts.args or {}) do argv[#argv + 1] = a end
  self.proc = bin.start(argv, {
    env = env, deadline_ms = opts.deadline_ms or 300000,
    on_output = function(stream, chunk)
      if stream == "stderr" then self.err = self.err .. chunk else self.out = self.out .. chunk end
    end,
  })
  if opts.no_wait then return self end
  -- a start bound of its own: the sanitized bot beside stress-ng (load 35-50) once took more than
  -- the 30 s of the other waits to say slack.ready; the line ends the wait
  M.wait(function()
    return self.err:find("slack.ready", 1, true) or self.done
      or (not require("support.procs").alive(self.proc.pid))
  end, "slack.ready in the bot's log", 120000)
  assert(self.err:find("slack.ready", 1, true), "the bot did not start:\n" .. self.err)
  for port, serves in self.err:gmatch("slack%.listening [^\n]-port=(%d+) serves=(%a+)") do
    self[serves .. "_port"] = tonumber(port)
  end
  return self
end

function Bot:signal(name)
  local r = assert(core.spawn{ argv = { "/bin/kill", "-" .. name, tostring(self.proc.pid) } }):wait()
  assert(r.exit == 0, "kill failed: " .. r.stderr)
end

function Bot:wait()
  self.result = self.result or self.proc:wait()
  return self.result
end

-- POSTs to the bot's Events API listener: status, headers, body.
function Bot:post(path, body, headers)
  headers = headers or {}
  headers["content-type"] = headers["content-type"] or "application/json"
  return core.http.request{ method = "POST", url = ("http://127.0.0.1:%d%s"):format(self.events_port, path),
                            body = body, headers = headers, deadline_ms = 10000 }
end

return M
