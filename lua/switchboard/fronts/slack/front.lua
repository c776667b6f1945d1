-- The dispatcher's front interface for Slack: a card is posted in its thread at once
-- (chat.postMessage, and a reaction on the ask), then edited in place (chat.update) as the work
-- goes — its progress at most once per `card.update_every_ms` per card, coalesced (only the
-- newest state is sent), and all cards together at most `card.updates_per_minute` times a
-- minute (chat.update is Tier 3: about 50 a minute per workspace), so each card is updated
-- less often as cards multiply — and its final state goes at once and always lands: a final
-- update is not paced (only a 429's Retry-After holds it), it is retried through 429s and
-- transport failures for `api.final_give_up_ms`, a 429's Retry-After holds back every card's
-- next update, and a state an update failed to send is sent again unless a newer one came. Output that does not fit the card goes up as
-- a file in the thread (files.getUploadURLExternal → upload → files.completeUploadExternal) and
-- the card links it.
--
--   local f = front.new{api = webapi, policy = policy.current}
--   f:post(thread, msg, where?) → handle;  f:update(handle, msg)     (the dispatcher calls these)
--        where: {channel, thread_ts, ask_ts?}, the ask's reply address (the message's reply_to,
--        carried in the ask); without it, the place the thread's name says (no reaction)
--   f:say(where, text)             a plain answer in a thread (a refusal)
--   f:link_for(thread, where) → function() → permalink | nil   (where: the ask's reply address)
--   f:attach_file(thread, {name, bytes, title}, where?)   a file (a screenshot) posted in the thread
--   f:flush(signal)                yields until every card's last state was sent (or signal); from
--                                  then on no card waits for its pace (the drain's end is near)
local core = require("switchboard.core")
local blocks = require("switchboard.fronts.slack.blocks")
local events = require("switchboard.fronts.slack.events")
local in_flight = require("switchboard.dispatch.in_flight")
local text = require("switchboard.fronts.slack.text")

local M = {}
local F = {}
F.__index = F

function M.new(opts)
  local log = opts.log or core.log
  return setmetatable({
    api = opts.api,
    policy = opts.policy,
    log = log,
    now_ms = opts.now_ms or core.now_ms,
    -- card and answer tasks still sending; cards.hurrying is aborted at shutdown: a final state
    -- no longer waits for its pace
    cards = in_flight.cards(log, "slack.front_error"),
    stats = { final_lag_ms = {} }, -- final card sent − final state known (bench)
    next_update_ms = 0, -- the earliest time the next chat.update of any card may go
    steers = true, -- a mention in a thread whose run works goes to that run (dispatcher deliver)
  }, F)
end

local function settings(self)
  return self.policy().slack
end

-- Runs fn as a counted task: flush() waits for every one.
function F:spawn(fn) self.cards:go(fn) end

-- A second TERM during the drain aborts the signal before the flush begins: false at once.
-- The cards' pacing (card.update_every_ms, updates_per_minute) ends here: the drain's deadline
-- is near, and what Slack cannot take now (a 429) is still waited out, up to the signal.
function F:flush(signal) return self.cards:flush(signal) end

local function log_failure(self, what, h, err)
  self.log("warn", "slack.api_failed", { call = what, channel = h.where and h.where.channel,
    error = err and (err.error or err.kind), message = err and err.message })
end

-- The thread's permalink, looked up only when it is needed (a pull request's body links back
-- to the thread): → function() → url | nil. chat.getPermalink on the thread's first message.
function F:link_for(_, where)
  if not (where and where.channel and where.thread_ts) then return nil end
  local api, log = self.api, self.log
  return function()
    local res, err = api:call("chat.getPermalink", { channel = where.channel, message_ts = where.thread_ts },
      { channel = where.channel })
    if res and type(res.permalink) == "string" then return res.permalink end
    log("warn", "slack.api_failed", { call = "chat.getPermalink", channel = where.channel,
      error = err and (err.error or err.kind), message = err and err.message })
    return nil
  end
end

-- A plain answer (help, a refusal, "nothing to stop") in the thread.
function F:say(where, message)
  self:spawn(function()
    local s = settings(self)
    local _, err = self.api:call("chat.postMessage", {
      channel = where.channel, thread_ts = where.thread_ts, text = text.escape(message),
      unfurl_links = false, unfurl_media = false,
    }, { channel = where.channel, give_up_ms = s.api.final_give_up_ms })
    if err then log_failure(self, "chat.postMessage", { where = where }, err) end
  end)
end

local function command_title(card)
  local cmd = tostring(card.command or ""):gsub("%s+", " ")
  if #cmd > 60 then cmd = cmd:sub(1, 57) .. "..." end
  return "`" .. cmd .. "`"
end

-- files.getUploadURLExternal → POST the bytes → files.completeUploadExternal in the thread.
function F:upload_file(where, name, content, title, s)
  local got, err = self.api:call("files.getUploadURLExternal", { filename = name, length = #content },
    { form = true, channel = where.channel, give_up_ms = s.api.final_give_up_ms })
  if got then
    local ok, uerr = self.api:upload(got.upload_url, content)
    if not ok then err = uerr end
  end
  local done
  if got and not err then
    done, err = self.api:call("files.completeUploadExternal", {
      files = { { id = got.file_id, title = title } },
      channel_id = where.channel, thread_ts = where.thread_ts,
    }, { form = true, channel = where.channel, give_up_ms = s.api.final_give_up_ms })
  end
  return done, err
end

-- A file the run made (an agent's screenshot) posted in the thread, in a task of its own.
-- file: {name, bytes, title}. The bytes are scrubbed before their length is announced.
function F:attach_file(thread, file, where)
  where = where or events.parse_thread(thread)
  if not (where and where.channel and where.thread_ts) then return end
  self:spawn(function()
    local _, err = self:upload_file(where, file.name, core.log_scrub(file.bytes), file.title, settings(self))
    if err then log_failure(self, "files upload", { where = where }, err) end
  end)
end

-- Upload the whole output when it does not fit the card; remember where it went.
function F:attach_output(h, card, s)
  -- scrubbed here, before its length is announced (webapi scrubs it again, to no change)
  local content, name
  if card.kind == "agent" then -- a long answer: the Markdown as the model wrote it
    content = core.log_scrub("> " .. tostring(card.ask or ""):gsub("\n", "\n> ") .. "\n\n" .. card:body_text() .. "\n")
    name = ("answer-%s.md"):format((h.ts or "card"):gsub("%.", "-"))
  else
    content = core.log_scrub("$ " .. tostring(card.command) .. "\n" .. card:body_text() .. "\n")
    name = ("output-%s.txt"):format((h.ts or "card"):gsub("%.", "-"))
  end
  local done, err = self:upload_file(h.where, name, content, card.kind == "agent"
    and ("Answer of agent:" .. tostring(card.agent)) or ("Output of " .. command_title(card)), s)
  if err then
    log_failure(self, "files upload", h, err)
    h.file = { error = "the upload to Slack failed (" .. (err.error or err.kind or "?") .. ")" }
    return
  end
  local f = done.files and done.files[1] or {}
  h.file = { permalink = f.permalink or "", name = name }
end

function F:render(h, msg, s)
  return blocks.render(msg.card, { now_ms = self.now_ms(), max_block_chars = s.card.max_block_chars,
                                   max_answer_blocks = s.card.max_answer_blocks,
                                   thread = h.thread, file = h.file, message = msg })
end

-- Waits for the next state of the card (update() wakes it).
local next_state = in_flight.next_state

function F:card_worker(h)
  local s = settings(self)
  local where = h.where
  local msg = h.pending
  h.pending = nil
  local view = self:render(h, msg, s)
  local posted, err = self.api:call("chat.postMessage", {
    channel = where.channel, thread_ts = where.thread_ts, text = view.text, blocks = view.blocks,
    unfurl_links = false, unfurl_media = false,
  }, { channel = where.channel, give_up_ms = s.api.final_give_up_ms })
  if not posted then
    log_failure(self, "chat.postMessage", h, err)
    h.dead = true
    return
  end
  h.ts = posted.ts
  h.last_ms = self.now_ms()
  if msg.final then
    h.sent_final = true
    self:end_reaction(h, msg.card)
  end
  while not h.sent_final do
    next_state(h)
    local wait = h.last_ms + s.card.update_every_ms - self.now_ms()
    -- the pacing is for progress: a final state known meanwhile ends the wait (issue 36)
    if wait > 0 and not h.final_queued then core.sleep(wait, h.final_known) end
    self:update_slot(s, h)
    msg = h.pending -- the newest state: it may have changed during the waits
    h.pending = nil
    if msg.final and blocks.needs_file(msg.card, s.card.max_block_chars, s.card.max_answer_blocks) then
      self:attach_output(h, msg.card, s)
    end
    view = self:render(h, msg, s)
    local _, uerr = self.api:call("chat.update", {
      channel = where.channel, ts = h.ts, text = view.text, blocks = view.blocks,
    }, { channel = where.channel, give_up_ms = msg.final and s.api.final_give_up_ms or 0 })
    h.last_ms = self.now_ms()
    if uerr then
      log_failure(self, "chat.update", h, uerr)
      if uerr.kind == "rate_limited" and uerr.retry_after_ms then
        -- the limit is the workspace's, not this card's: every card waits it out, finals too
        self.next_update_ms = math.max(self.next_update_ms, self.now_ms() + uerr.retry_after_ms)
        self.hold_until_ms = math.max(self.hold_until_ms or 0, self.now_ms() + uerr.retry_after_ms)
      end
      -- not lost: sent again at the next turn unless a newer state came meanwhile
      if not msg.final and not h.pending then h.pending = msg end
    end
    if msg.final then
      h.sent_final = true
      self:end_reaction(h, msg.card)
      if h.final_known_ms then
        local lag = self.stats.final_lag_ms
        lag[#lag + 1] = h.last_ms - h.final_known_ms
      end
    end
  end
end

-- Waits for this card's turn among all cards: progress updates are spaced 60 s /
-- card.updates_per_minute apart, whichever card makes them. The slot is taken before the wait,
-- so cards take turns in the order they asked. A card whose final state is known goes at once
-- (a person waits for the answer, not for the elapsed seconds; issue 36), before every card
-- that only has progress to show — only a 429's Retry-After holds it — and still counts
-- against the spacing of the progress after it.
function F:update_slot(s, h)
  local spacing = 60000 // s.card.updates_per_minute
  local final = h.final_queued
  if final then
    self.finals_waiting = (self.finals_waiting or 0) + 1
  else
    while (self.finals_waiting or 0) > 0 and not h.final_queued and not self.cards.hurrying.aborted do
      core.sleep(spacing, self.cards.hurrying)
    end
    if h.final_queued then return self:update_slot(s, h) end
  end
  local now = self.now_ms()
  local slot
  if final then
    slot = math.max(now, self.hold_until_ms or 0)
    self.next_update_ms = math.max(self.next_update_ms, slot) + spacing
  else
    slot = math.max(now, self.next_update_ms, self.hold_until_ms or 0)
    self.next_update_ms = slot + spacing
  end
  if slot > now then core.sleep(slot - now, not final and h.final_known or self.cards.hurrying) end
  if final then
    self.finals_waiting = self.finals_waiting - 1
  elseif h.final_queued then
    return self:update_slot(s, h) -- the final came during a progress slot's wait
  end
end

-- How a card ended, for its ask's reaction: done | stopped | failed.
function M.outcome(card)
  local st = card and card.state
  if st == "stopped" or st == "cancelled" then return "stopped" end
  if st == "done" and (card.kind == "agent" or card.exit_code == 0) then return "done" end
  return "failed"
end

-- The run has ended: the ask's 👀 (slack.reaction) is replaced by the end's (reaction_end).
function F:end_reaction(h, card)
  local where = h.where
  local ends = settings(self).reaction_end
  if not (ends and where.ask_ts and h.reacted) then return end
  local s = settings(self)
  if not h.reacted.aborted then core.sleep(s.api.final_give_up_ms, h.reacted) end
  local _, err = self.api:call("reactions.remove", { channel = where.channel, timestamp = where.ask_ts,
    name = s.reaction }, { channel = where.channel })
  if err and err.error ~= "no_reaction" then log_failure(self, "reactions.remove", h, err) end
  _, err = self.api:call("reactions.add", { channel = where.channel, timestamp = where.ask_ts,
    name = ends[M.outcome(card)] }, { channel = where.channel })
  if err and err.error ~= "already_reacted" then log_failure(self, "reactions.add", h, err) end
end

function F:post(thread, msg, where)
  -- The ask's address (for the reaction), else the place the thread's name says.
  if where == nil then
    local t = events.parse_thread(thread)
    if t == nil then
      self.log("error", "slack.post_unplaced", { thread = tostring(thread) })
      return { thread = thread, dead = true, sent_final = true }
    end
    where = { channel = t.channel, thread_ts = t.thread_ts }
  end
  -- final_known also fires when the drain hurries every card (self.cards.hurrying, a parent)
  local h = { thread = thread, where = where, pending = msg, final_known = core.signal(self.cards.hurrying) }
  if msg.card == nil then
    self:say(where, msg.text)
    h.sent_final = true
    return h
  end
  if msg.final then h.final_known_ms = self.now_ms() end
  if where.ask_ts and not where.reacted then
    where.reacted = true
    h.reacted = core.signal() -- this card's end replaces the reaction, once it is on
    local s = settings(self)
    self:spawn(function()
      local _, err = self.api:call("reactions.add", { channel = where.channel, timestamp = where.ask_ts,
        name = s.reaction }, { channel = where.channel })
      if err and err.error ~= "already_reacted" then log_failure(self, "reactions.add", h, err) end
      h.reacted:abort("on")
    end)
  end
  self:spawn(function() self:card_worker(h) end)
  return h
end

function F:update(h, msg)
  if h.final_queued or h.sent_final or h.dead then return end
  if msg.final then h.final_known_ms = self.now_ms() end
  in_flight.put(h, msg)
end


-- The front's declaration (fronts/registry.lua): `switchboard slack` (commands/slack.lua wires
-- it to the host); its settings are the whole of policies/slack.lua (policy/schema.lua).
M.front = { name = "slack", command = "slack" }

return M
