-- What an Events API payload (from Socket Mode or the HTTP listener) means for the bot.
--
--   events.ask(payload, bot) → ask | nil, why      payload: the `event_callback` envelope
--     ask = {team, channel, thread_ts (the thread's root), ts, user, text, event_id, files?}
--   events.stop_action(payload, bot) → {team, channel, thread_ts, user, value} | nil, why
--   events.thread_name(team, channel, thread_ts) → the dispatcher's thread name
--
-- bot = {user_id, bot_id, team_id}: the identity auth.test named.
-- Asks are `app_mention`s and direct messages to the bot; a message from a bot (any, this one
-- included), an edit, a deletion or any other subtype is not an ask.
local text = require("switchboard.fronts.slack.text")

local M = {}

M.STOP_ACTION = "switchboard_stop"

function M.thread_name(team, channel, thread_ts)
  return ("%s/%s/%s"):format(team, channel, thread_ts)
end

-- team/channel/thread back from a thread name.
function M.parse_thread(name)
  local team, channel, ts = tostring(name):match("^([%w]+)/([%w]+)/([%d.]+)$")
  if not team then return nil end
  return { team = team, channel = channel, thread_ts = ts }
end

local function is_string(v) return type(v) == "string" and v ~= "" end

function M.ask(payload, bot)
  if type(payload) ~= "table" or payload.type ~= "event_callback" then
    return nil, "not an event_callback"
  end
  local ev = payload.event
  if type(ev) ~= "table" then return nil, "no event" end
  if ev.type ~= "app_mention" and not (ev.type == "message" and ev.channel_type == "im") then
    return nil, "not an ask (" .. tostring(ev.type) .. ")"
  end
  -- file_share: a message with files attached (a DM's; a mention carries `files` without it)
  if ev.subtype ~= nil and ev.subtype ~= "file_share" then
    return nil, "a message subtype (" .. tostring(ev.subtype) .. ")"
  end
  if ev.bot_id ~= nil or ev.bot_profile ~= nil then return nil, "from a bot" end
  if ev.edited ~= nil then return nil, "an edit" end
  if not (is_string(ev.user) and is_string(ev.channel) and is_string(ev.ts)) then
    return nil, "no user, channel or ts"
  end
  if bot and ev.user == bot.user_id then return nil, "from the bot itself" end
  local team = payload.team_id or ev.team
  if not is_string(team) then return nil, "no team" end
  local root = is_string(ev.thread_ts) and ev.thread_ts or ev.ts
  return {
    team = team, channel = ev.channel, thread_ts = root, ts = ev.ts, user = ev.user,
    text = text.ask_text(ev.text, bot and bot.user_id), event_id = payload.event_id,
    files = type(ev.files) == "table" and ev.files or nil,
  }
end

-- A Stop button press (an interactive `block_actions` payload).
function M.stop_action(payload, bot)
  if type(payload) ~= "table" or payload.type ~= "block_actions" then
    return nil, "not block_actions"
  end
  local action
  for _, a in ipairs(payload.actions or {}) do
    if type(a) == "table" and a.action_id == M.STOP_ACTION then action = a end
  end
  if not action then return nil, "not the stop button" end
  local user = type(payload.user) == "table" and payload.user.id or nil
  local team = (type(payload.team) == "table" and payload.team.id) or (type(payload.user) == "table"
    and payload.user.team_id) or nil
  local channel = type(payload.channel) == "table" and payload.channel.id or nil
  local where = M.parse_thread(action.value)
  if not (is_string(user) and where) then return nil, "no user or thread" end
  if (team and team ~= where.team) or (channel and channel ~= where.channel) then
    return nil, "the button names another thread"
  end
  return { team = where.team, channel = where.channel, thread_ts = where.thread_ts, user = user,
           value = action.value }
end

return M
