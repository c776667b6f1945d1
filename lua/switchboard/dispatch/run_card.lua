-- The card of an agent run (a free-text ask): the same frame as a command's card
-- (dispatch/card.lua: thread, agent, backend, repository, notes; cut to max_chars), with the
-- run's own fields. A front that renders cards itself (Slack's Block Kit) reads the fields:
--
--   kind = "agent", ask (the request's text), state, turns, max_turns, tool_now (the call
--   running now: "$ first line of its command" or "read_file PATH"), started_ms,
--   finished_ms, tokens_in, tokens_out (fresh input and output), cache_read, cache_write
--   (input tokens read from and written to the prompt cache), cost_usd, waiting (a ⏳ line while the fleet or the API makes
--   the run wait), answer (the model's last text), problem (why it ended, when not done),
--   todos (the model's plan: {content, status}; checklist_lines() as ☑ / ▶ / ☐ lines),
--   commentary (the model's latest line of text beside its calls), page_url (the run's page),
--   pull_request ({url, number, action = opened|updated, branch, draft} when the run opened or
--   updated one), publish_problem (why its changes could not be pushed or the PR opened),
--   page_url (the run page), diff ({added, removed, files}: the run's changes; diff_line()),
--   preview_url (an exposed port's preview URL: a Preview button)
--
--   [main] agent:coding · local · acme/api
--   note: …
--   > make a file hello.txt containing hi, then show it
--   … turn 2 · $ cat hello.txt · 3s · 1,234 tokens in / 56 out · cache 9,000 read / 800 written · $0.04
-- and at the end:
--   ✓ done after 3 turns in 4.2s · 2,345 tokens in / 120 out
--   <the model's answer>
local card = require("switchboard.dispatch.card")
local run_events = require("switchboard.dispatch.run_events")

local M = {}
local R = setmetatable({}, { __index = card })
R.__index = R

-- fields: thread, agent, ask, repo?, user?, max_turns?, model? (the model this run uses),
-- effort? (low | medium | high: the thread's effort: word), chosen? (the thread chose them)
function M.new(fields)
  local c = card.new{ thread = fields.thread, user = fields.user, agent = fields.agent,
                      command = fields.ask, repo = fields.repo }
  c.kind = "agent"
  c.ask = fields.ask
  c.max_turns = fields.max_turns
  c.model, c.effort, c.chosen = fields.model, fields.effort, fields.chosen
  c.turns = 0
  c.tokens_in, c.tokens_out = 0, 0
  return setmetatable(c, R)
end

M.is_run_card = function(c) return getmetatable(c) == R end

-- The run's changes in a line ("+12 −3 in 2 files"), once the run has counted them (c.diff:
-- {added, removed, files}, set by dispatch/agent_run.lua at the end of a run in a repository).
function R:diff_line()
  local d = self.diff
  if not d then return nil end
  return ("+%d −%d in %d file%s"):format(d.added, d.removed, d.files, d.files == 1 and "" or "s")
end

---------------------------------------------------------------------------------------------
-- State changes (the run calls these)

function R:preparing(what) self.state = "preparing"; self.tool_now = what end
function R:turn(n) self.turns = n; self.tool_now = nil; self.waiting = nil end
function R:tool(text) self.tool_now = text end
function R:tool_done() self.tool_now = nil end
function R:wait(text) self.waiting = text end
-- extra: {cache_read, cache_write, cost_usd} (agent/run.lua)
function R:usage(tokens_in, tokens_out, extra)
  self.tokens_in, self.tokens_out = tokens_in, tokens_out
  if extra then
    self.cache_read, self.cache_write, self.cost_usd = extra.cache_read, extra.cache_write, extra.cost_usd
  end
end
-- A note that is replaced rather than repeated (the latest compaction, the latest cut).
function R:set_note(key, note)
  self.keyed_notes = self.keyed_notes or {}
  local at = self.keyed_notes[key]
  if at then self.notes[at] = note; return end
  self:add_note(note)
  self.keyed_notes[key] = #self.notes
end
-- A message of the thread that went to this run while it works (dispatch/dispatcher.lua
-- deliver): acknowledged on the card, read by the run at its next turn boundary.
function R:steered(user, text)
  self.steers = (self.steers or 0) + 1
  local what = card.cut_line(tostring(text or ""):gsub("%s+", " "), 80)
  self:set_note("steer", ("↪ added to the running task%s: “%s”"):format(
    self.steers > 1 and (" (%d messages)"):format(self.steers) or "", what))
end

-- The model's plan (agent/todos.lua): {content, status} items, the whole list each time.
function R:set_todos(list) self.todos = list end
-- An exposed port's preview URL (agent/processes.lua expose_port): the card's Preview button.
function R:set_preview(url) self.preview_url = url end

-- The model's latest commentary: the last non-empty line of the text beside its calls.
function R:comment(text)
  local last
  for line in tostring(text):gmatch("[^\n]+") do
    if line:match("%S") then last = line end
  end
  if last then self.commentary = (last:gsub("^%s+", ""):gsub("%s+$", "")) end
end

-- The plan as checklist lines: ☑ completed, ▶ in progress, ☐ pending.
M.MARKS = { completed = "☑", in_progress = "▶", pending = "☐" }
function R:checklist_lines()
  local out = {}
  for i, t in ipairs(self.todos or {}) do out[i] = (M.MARKS[t.status] or "☐") .. " " .. t.content end
  return out
end

-- The model is thinking (extended thinking streams before its answer or call).
function R:thinking() self.tool_now = "💭 thinking" end

-- state: done | stopped | model_error | infra | budget | turns | spend | context | no_key |
-- clone_failed
function R:ended(state, now_ms, answer, problem)
  self.state = state
  self.finished_ms = now_ms
  self.answer = answer
  self.problem = problem
  self.tool_now, self.waiting = nil, nil
end

function R:final()
  local st = self.state
  return st ~= "queued" and st ~= "provisioning" and st ~= "running" and st ~= "preparing"
end

---------------------------------------------------------------------------------------------
-- The card as a subscriber of its run's events (dispatch/run_events.lua): each event that
-- changes what the card shows, as the state change above. now_ms: the clock of the card's end.

local FOLLOW = {
  phase = function(c, e) if e.state == "preparing" then c:preparing(e.text) else c.state = e.state end end,
  turn = function(c, e) c:turn(e.turn) end,
  activity = function(c, e) if e.text then c:tool(e.text) else c:tool_done() end end,
  thinking = function(c) c:thinking() end,
  commentary = function(c, e) c:comment(e.text) end,
  usage = function(c, e)
    c:usage(e.tokens_in, e.tokens_out, { cache_read = e.cache_read, cache_write = e.cache_write, cost_usd = e.cost_usd })
  end,
  waiting = function(c, e) c.waiting = e.text end,
  note = function(c, e) if e.key then c:set_note(e.key, e.text) else c:add_note(e.text) end end,
  page = function(c, e) c.page_url = e.url end,
  steered = function(c, e) c:steered(e.user, e.text) end,
  todos = function(c, e) c:set_todos(e.todos) end,
  preview = function(c, e) c:set_preview(e.url) end,
  started = function(c, e) c.transcript_path = e.transcript_path end,
  publish = function(c, e)
    if e.state == "published" then c.pull_request = e.pull_request end
    if e.state == "failed" then c.publish_problem = e.problem end
  end,
  diff = function(c, e) c.diff = { added = e.added, removed = e.removed, files = #e.files } end,
}

function M.follow(c, now_ms)
  return function(e)
    if e.type == "run_end" then return c:ended(e.state, now_ms(), e.answer, e.problem) end
    local apply = FOLLOW[e.type]
    if apply then apply(c, e) end
  end
end

-- A run's event stream (dispatch/run_events.lua) its card follows first. opts: log, fields.
function M.events(c, now_ms, opts)
  local stream = run_events.new(opts)
  stream:subscribe("card", M.follow(c, now_ms))
  return stream
end

---------------------------------------------------------------------------------------------
-- Text

local function thousands(n)
  local s = tostring(math.floor(n or 0))
  return (s:reverse():gsub("(%d%d%d)", "%1,"):reverse():gsub("^,", ""))
end

function R:tokens_text()
  local s = ("%s tokens in / %s out"):format(thousands(self.tokens_in), thousands(self.tokens_out))
  if (self.cache_read or 0) > 0 or (self.cache_write or 0) > 0 then
    s = s .. (" · cache %s read / %s written"):format(thousands(self.cache_read), thousands(self.cache_write))
  end
  if self.cost_usd then s = s .. (" · $%.2f"):format(self.cost_usd) end
  return s
end

local function plural(n, word) return ("%d %s%s"):format(n, word, n == 1 and "" or "s") end

function R:elapsed_ms(now_ms)
  if not self.started_ms then return nil end
  return (self.finished_ms or now_ms or self.started_ms) - self.started_ms
end

function R:header(max_chars)
  local first = { "[" .. tostring(self.thread) .. "] agent:" .. tostring(self.agent) }
  if self.backend then first[#first + 1] = self.backend end
  if self.repo then first[#first + 1] = self.repo end
  -- the model when the thread chose one (model: or effort:); Slack's card always names it
  if self.model and self.chosen then first[#first + 1] = self.model .. (self.effort and (" · effort " .. self.effort) or "") end
  local lines = { card.cut_line(table.concat(first, " · "), max_chars // 8) }
  for _, note in ipairs(self.notes) do
    lines[#lines + 1] = card.cut_line("note: " .. note, max_chars // 8)
  end
  if self.page_url then lines[#lines + 1] = "run page: " .. self.page_url end
  if self.preview_url then lines[#lines + 1] = "preview: " .. self.preview_url end
  lines[#lines + 1] = "> " .. card.cut_line(self.ask or "", max_chars // 4)
  return table.concat(lines, "\n")
end

function R:status_line(now_ms, max_chars)
  local st = self.state
  local secs = card.seconds_text
  if st == "queued" or st == "provisioning" or st == "cancelled" or st == "unprovisioned" then
    return card.status_line(self, now_ms, max_chars)
  end
  local el = self:elapsed_ms(now_ms)
  if st == "preparing" or st == "running" then
    local parts = { "… " .. (st == "preparing" and "preparing" or ("turn " .. self.turns)) }
    if self.commentary then parts[#parts + 1] = "💬 " .. card.cut_line(self.commentary, max_chars // 6) end
    if self.tool_now then parts[#parts + 1] = card.cut_line(self.tool_now, max_chars // 4) end
    parts[#parts + 1] = secs(el, true)
    if self.tokens_in > 0 or self.tokens_out > 0 then parts[#parts + 1] = self:tokens_text() end
    local line = table.concat(parts, " · ")
    for _, l in ipairs(self:checklist_lines()) do line = line .. "\n" .. card.cut_line(l, max_chars // 8) end
    if self.waiting then line = line .. "\n" .. card.cut_line("⏳ " .. self.waiting, max_chars // 4) end
    return line
  end
  local after = ("after %s in %s · %s"):format(plural(self.turns, "turn"), secs(el), self:tokens_text())
  if st == "done" then return "✓ done " .. after end
  if st == "stopped" then
    return "■ stopped " .. after .. " — the model stream and the running command were stopped; the executor was released"
  end
  if st == "model_error" then return "✗ model API error " .. after end
  if st == "infra" then return "✗ sandbox failure " .. after .. " — infrastructure, not the model's or the command's doing" end
  if st == "budget" then return "⏱ run budget exhausted " .. after end
  if st == "turns" then return ("⏹ stopped at the turn limit (%d) %s"):format(self.max_turns or self.turns, after) end
  if st == "spend" then return "💲 stopped at a spend cap " .. after end
  if st == "context" then return "✗ the conversation outgrew the model's window " .. after end
  if st == "no_key" then return "✗ not run — no model credential" end
  if st == "clone_failed" then return "✗ not run — the repository could not be cloned" end
  return st
end

function R:body_text()
  if not self:final() then return "" end
  local parts = {}
  local pr, lead = self.pull_request, nil
  if pr then
    lead = ("⇢ %spull request #%s %s: %s (branch %s)"):format(pr.draft and "draft " or "", tostring(pr.number),
      pr.action, tostring(pr.url), pr.branch)
  elseif self.publish_problem then
    lead = "✗ no pull request — " .. self.publish_problem
  end
  if self.problem and self.problem ~= "" then parts[#parts + 1] = self.problem end
  if self.answer and self.answer ~= "" then parts[#parts + 1] = self.answer end
  local text = table.concat(parts, "\n\n")
  if lead then return text == "" and lead or (lead .. "\n" .. text) end
  return text
end

function R:summary(now_ms)
  local s = "[" .. tostring(self.thread) .. "] " .. tostring(self.agent)
  if self.state == "running" then
    return s .. " turn " .. self.turns .. " " .. card.seconds_text(self:elapsed_ms(now_ms), true)
  end
  return s .. " " .. self.state
end

return M
