-- The status card of one ask: what a front shows in the thread while the command runs and
-- after it ended. Plain text, so the console prints it as is and the Slack front can post it
-- as a message (and edit it in place).
--
--   [main] agent:coding · local · acme/api
--   note: resident unavailable (not provided by this build) — using fresh sandbox
--   $ npm test
--   … running 12s
--
-- and when it ended, the status line says how, followed by the output:
--   ✓ exit 0 after 3.2s | ✗ exit 2 after 0.4s | ⏱ exit 124 after 300s (timed out)
--   ■ stopped after 2.0s — the command's process group was killed; the executor was released
--   ⏳ Sandbox fleet busy — …            (capacity: nothing ran; never a command's exit)
--   ✗ sandbox failure after 1.0s — infrastructure, not the command's exit status
--   ✗ not run · ✗ could not provision agent NAME · ■ not run — REASON
--
-- A rendered card never exceeds max_chars (policy: timeouts card.max_chars). Output that does
-- not fit keeps its head and its tail, cut at line ends, and the middle becomes one line
-- naming the file that keeps the whole output (the dispatcher writes it; see full_path).
-- Lengths are counted in bytes, which is never less than characters, and a cut never splits
-- a UTF-8 sequence.
local text_cut = require("switchboard.text_cut")

local M = {}
M.__index = M

-- fields: thread, agent, command, repo?, user?
function M.new(fields)
  return setmetatable({
    thread = fields.thread,
    user = fields.user,
    agent = fields.agent,
    command = fields.command,
    repo = fields.repo,
    state = "queued",
    notes = {},
  }, M)
end

---------------------------------------------------------------------------------------------
-- State changes (the dispatcher calls these)

function M:provisioning() self.state = "provisioning" end

-- backend: where the commands run; note: a line to show (the factory's named fallback reason,
-- the local executor's walls), or a list of them (exec/stack.lua's notes).
function M:provisioned(backend, note)
  self.backend = backend
  for _, line in ipairs(type(note) == "table" and note or { note }) do
    if line ~= "" then self.notes[#self.notes + 1] = line end
  end
end

function M:add_note(note) self.notes[#self.notes + 1] = note end

function M:running(now_ms)
  self.state = "running"
  self.started_ms = now_ms
end

local function seconds_text(ms, whole)
  if ms == nil or ms < 0 then ms = 0 end
  local s = ms / 1000
  if s >= 60 then
    local total = math.floor(s + 0.5)
    return ("%dm %02ds"):format(total // 60, total % 60)
  end
  if whole or s >= 10 then return ("%ds"):format(math.floor(s + (whole and 0 or 0.5))) end
  return ("%.1fs"):format(s)
end
M.seconds_text = seconds_text

-- A result of ex:exec (render.text already filled in). The card shows the status on its own
-- line, so the text's leading "exit N: " goes.
function M:finished(result, now_ms)
  self.finished_ms = now_ms
  self.exit_code = result.exit_code
  self.timed_out = result.timed_out and not result.aborted
  self.state = result.aborted and "stopped" or "done"
  local text = result.text or ""
  if type(result.exit_code) == "number" and result.exit_code ~= 0 then
    text = text:gsub("^exit %-?%d+: ?", "", 1):gsub("^exit %-?%d+:$", "", 1)
  end
  self.body = text
end

-- err: an exec error (switchboard.exec.errors). backend names the failing side.
function M:failed(err, now_ms, errors)
  self.finished_ms = now_ms
  local message = tostring(err)
  if errors.is_capacity(err) then
    self.state = "busy"
    self.busy_message = (message:gsub("^[Ss]andbox fleet busy%s*[—%-]+%s*", "", 1))
  elseif errors.is_infra(err) then
    self.state = "infra"
    self.body = message
  else -- tool (the null executor's refusal, a bad path) or refused (run budget exhausted)
    self.state = "refused"
    self.body = errors.is_refused(err) and ("exit " .. tostring(err.exit_code or 124) .. ": "
      .. message) or message
  end
end

-- Provisioning failed (an unknown backend, a sandbox URL that is not set).
function M:unprovisioned(err, now_ms)
  self.finished_ms = now_ms
  self.state = "unprovisioned"
  self.body = tostring(err)
end

-- Never started: stopped while queued, or the console shut down.
function M:cancelled(reason, now_ms)
  self.finished_ms = now_ms
  self.state = "cancelled"
  self.reason = reason
end

function M:final()
  return self.state ~= "queued" and self.state ~= "provisioning" and self.state ~= "running"
end

---------------------------------------------------------------------------------------------
-- Text

local function elapsed(self, now_ms)
  if self.started_ms == nil then return nil end
  return (self.finished_ms or now_ms or self.started_ms) - self.started_ms
end

function M:status_line(now_ms, max_chars)
  local st = self.state
  if st == "queued" then
    return "… queued behind " .. (self.behind or "this thread's running ask")
      .. " — its clock starts when it runs"
  end
  if st == "provisioning" then return "… provisioning" end
  if st == "running" then return "… running " .. seconds_text(elapsed(self, now_ms), true) end
  local after = self.started_ms and (" after " .. seconds_text(elapsed(self, now_ms))) or ""
  if st == "done" then
    if self.timed_out then return "⏱ exit " .. tostring(self.exit_code) .. after .. " (timed out)" end
    if self.exit_code == 0 then return "✓ exit 0" .. after end
    return "✗ exit " .. tostring(self.exit_code) .. after
  end
  if st == "stopped" then
    return "■ stopped" .. after .. " — the command's process group was killed; the executor "
      .. "was released"
  end
  if st == "busy" then
    return M.cut_line("⏳ Sandbox fleet busy — " .. (self.busy_message or ""), max_chars // 2)
  end
  if st == "infra" then
    local who = self.backend == "local" and "local executor" or "sandbox"
    return "✗ " .. who .. " failure" .. after .. " — infrastructure, not the command's exit status"
  end
  if st == "refused" then return "✗ not run" end
  if st == "unprovisioned" then return "✗ could not provision agent " .. tostring(self.agent) end
  if st == "cancelled" then return "■ not run — " .. tostring(self.reason) end
  return st
end

-- The header: thread, agent, backend, repository, notes, the command.
function M:header(max_chars)
  local first = { "[" .. tostring(self.thread) .. "] agent:" .. tostring(self.agent) }
  if self.backend then first[#first + 1] = self.backend end
  if self.repo then first[#first + 1] = self.repo end
  local lines = { M.cut_line(table.concat(first, " · "), max_chars // 8) }
  for _, note in ipairs(self.notes) do
    lines[#lines + 1] = M.cut_line("note: " .. note, max_chars // 8)
  end
  lines[#lines + 1] = "$ " .. M.cut(self.command or "", max_chars // 4)
  return table.concat(lines, "\n")
end

-- One line for a front that shows running asks in a status bar (the console on a terminal).
function M:summary(now_ms)
  local s = "[" .. tostring(self.thread) .. "] " .. tostring(self.agent)
  if self.state == "running" then return s .. " running " .. seconds_text(elapsed(self, now_ms), true) end
  return s .. " " .. self.state
end

---------------------------------------------------------------------------------------------
-- Cutting

-- The largest n ≤ limit such that s:sub(1, n) does not end inside a UTF-8 sequence.
-- The smallest start ≥ from such that s:sub(start) begins on a character boundary.
local function utf8_suffix_start(s, from)
  local i = from
  while i <= #s do
    local b = s:byte(i)
    if b < 0x80 or b >= 0xC0 then break end
    i = i + 1
  end
  return i
end

-- One line cut to at most max bytes, ending in "…" when cut.
function M.cut_line(s, max)
  s = s:gsub("\n.*$", " …")
  if #s <= max then return s end
  local ell = "…"
  return s:sub(1, text_cut.prefix_len(s, math.max(0, max - #ell))) .. ell
end

local function thousands(n)
  local s = tostring(math.floor(n))
  local out = s:reverse():gsub("(%d%d%d)", "%1,"):reverse()
  return (out:gsub("^,", ""))
end

local function count_lines(s)
  local _, n = s:gsub("\n", "")
  return n + ((s ~= "" and s:sub(-1) ~= "\n") and 1 or 0)
end

-- The line standing in for what was cut. where: a file path, or {error = why}.
function M.marker(lines, bytes, where)
  local tail
  if type(where) == "string" then
    tail = "the whole output is in " .. where
  elseif type(where) == "table" and where.error then
    tail = "the whole output could not be kept: " .. tostring(where.error)
  else
    tail = "the rest was not kept"
  end
  return ("… [%s lines (%s bytes) cut here — %s] …"):format(thousands(lines), thousands(bytes), tail)
end

-- text cut to at most max bytes: the head (about a third) and the tail (the rest: errors are
-- usually at the end), each cut at a line end when one is near, joined by the marker line.
-- Returns the text and whether it was cut.
function M.cut(text, max, where)
  text = text or ""
  if #text <= max then return text, false end
  local provisional = M.marker(#text, #text, where)
  local avail = max - #provisional - 2
  if avail < 2 then return text:sub(1, text_cut.prefix_len(text, math.max(0, max))), true end
  local head_budget = avail // 3
  local tail_budget = avail - head_budget

  local head_len = text_cut.prefix_len(text, head_budget)
  local nl = text:sub(1, head_len):match(".*()\n")
  if nl and nl - 1 >= head_budget // 2 then head_len = nl - 1 end

  local tail_start = utf8_suffix_start(text, #text - tail_budget + 1)
  local first_nl = text:find("\n", tail_start, true)
  if first_nl and first_nl - tail_start < tail_budget // 2 then tail_start = first_nl + 1 end
  if tail_start <= head_len then tail_start = head_len + 1 end

  local head, tail = text:sub(1, head_len), text:sub(tail_start)
  local omitted = text:sub(head_len + 1, tail_start - 1)
  local marker = M.marker(count_lines((omitted:gsub("^\n", ""))), #omitted, where)
  return head .. "\n" .. marker .. "\n" .. tail, true
end

-- The body before it is cut: the output, or what an unfinished card has none of.
function M:body_text()
  if self.state == "busy" then return "" end
  return self.body or ""
end

-- Whether the body will be cut at max_chars (then the dispatcher keeps the whole output).
function M:overflows(max_chars, now_ms)
  local fixed = #self:header(max_chars) + 1 + #self:status_line(now_ms, max_chars)
  local body = self:body_text()
  return body ~= "" and fixed + 1 + #body > max_chars
end

-- opts: max_chars (required), now_ms. self.full_path / self.full_error say where the whole
-- output went when it was cut.
function M:render(opts)
  local max = opts.max_chars
  local text = self:header(max) .. "\n" .. self:status_line(opts.now_ms, max)
  local body = self:body_text()
  if body ~= "" and self:final() then
    local where = self.full_path or (self.full_error and { error = self.full_error }) or nil
    local budget = max - #text - 1
    text = text .. "\n" .. M.cut(body, math.max(0, budget), where)
  end
  if #text > max then text = text:sub(1, text_cut.prefix_len(text, max)) end
  return text
end

return M
