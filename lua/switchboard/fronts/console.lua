-- The console front: the dispatcher's front interface on a terminal or a pipe.
--
-- On a terminal (standard output is one), running asks share one status line at the bottom
-- ("[main] coding running 3s | [ci] review provisioning"), cut to the terminal's width and
-- rewritten in place; each final card is printed in full above it. On a pipe (or a file),
-- only final cards and answers are printed, one after another, each followed by a blank line.
-- Answers that are not cards (help, an unknown agent) start with "[thread] " so that a
-- session with several threads stays readable.
--
-- Input: front:serve(d, {thread, user, stop}) reads standard input (through core.read_stdin,
-- which yields the task instead of blocking the loop) and hands each line to the dispatcher as
-- a message of the current thread; `/thread NAME` switches threads. From a pipe (or a terminal
-- the front does not edit on) input is cut into lines as it arrives. When the front edits
-- (`edit`: standard input and output are the same terminal, put in raw mode by the caller),
-- the front owns the input line: it keeps what the user typed below the status line and draws
-- both again after every change, so neither output nor status ever overwrites typed text, and
-- a submitted line is left on a line of its own in the scrollback.
--
-- The live area (status line, then the input line) never reaches the terminal's last column,
-- so it never wraps and is erased exactly: carriage return, cursor up, clear to the end.
local core = require("switchboard.core")

local M = {}
local F = {}
F.__index = F

M.PROMPT = "> "
M.DEFAULT_WIDTH = 80

-- opts: tty (boolean: rewrite a status line in place), edit (boolean: own the input line;
-- needs tty), width (the terminal's columns; default 80), write (function(bytes); default
-- io.stdout:write + flush)
function M.new(opts)
  opts = opts or {}
  local write = opts.write or function(bytes)
    io.stdout:write(bytes)
    io.stdout:flush()
  end
  local tty = opts.tty and true or false
  local edit = tty and opts.edit and true or false
  return setmetatable({
    -- everything shown passes the log's redaction (a repository secret a command printed:
    -- docs/secrets.md), as every text the Slack front posts does
    tty = tty, edit = edit, live = {},
    write = function(bytes) return write(core.log_scrub(bytes)) end,
    -- typed at a terminal, a line for a thread whose agent run works goes to that run; from a
    -- pipe each line is an ask of its own (dispatcher deliver)
    steers = edit,
    width = opts.width or M.DEFAULT_WIDTH,
    editing = false, -- the input line is shown (while serve reads keys)
    input = "",      -- what the user typed and has not submitted yet
    drawn = 0,       -- rows of the live area on screen; the cursor is on its last one
    shown = {},      -- those rows' text
  }, F)
end

---------------------------------------------------------------------------------------------
-- Text that fits: one terminal row per character (wide characters are not told apart)

-- The characters of s as a terminal shows them: valid UTF-8 characters as they are, control
-- characters (C0, DEL, C1) as a space, so no escape sequence reaches the screen through a
-- status or an input line, and each byte of a broken sequence as "?".
local function chars(s)
  local out = {}
  local i, n = 1, #s
  while i <= n do
    local b = s:byte(i)
    local len = b < 0x80 and 1 or b >= 0xF0 and b < 0xF5 and 4 or b >= 0xE0 and 3
      or b >= 0xC2 and b < 0xE0 and 2 or 0
    local ch = len > 0 and s:sub(i, i + len - 1) or nil
    if ch and (#ch < len or not pcall(utf8.codepoint, ch)) then ch = nil end
    if ch == nil then
      out[#out + 1] = "?"
      i = i + 1
    else
      local cp = utf8.codepoint(ch)
      if cp < 0x20 or (cp >= 0x7F and cp < 0xA0) then ch = " " end
      out[#out + 1] = ch
      i = i + len
    end
  end
  return out
end
M.chars = chars

-- text as at most cols characters; a cut one ends with "…".
function M.fit(text, cols)
  local cs = chars(text)
  if cols <= 0 then return "" end
  if #cs <= cols then return table.concat(cs) end
  return table.concat(cs, "", 1, cols - 1) .. "…"
end

-- The end of text as at most cols characters; a cut one starts with "…" (the typed line
-- scrolls left as it grows, so the cursor's end stays in view).
function M.fit_tail(text, cols)
  local cs = chars(text)
  if cols <= 0 then return "" end
  if #cs <= cols then return table.concat(cs) end
  return "…" .. table.concat(cs, "", #cs - cols + 2, #cs)
end

local function remove(list, item)
  for i, v in ipairs(list) do
    if v == item then return table.remove(list, i) end
  end
end

function F:status_text()
  local parts = {}
  for _, h in ipairs(self.live) do parts[#parts + 1] = h.summary or "" end
  return table.concat(parts, " | ")
end

-- The columns a live row may use: one less than the terminal's, so a row never reaches the
-- last column (where a terminal wraps, or holds the cursor in a pending wrap).
function F:cols()
  return math.max(self.width - 1, 1)
end

-- The live area as it should be now: the status line (when asks run), then the input line
-- (while editing), each cut to fit one row.
function F:live_rows()
  local rows = {}
  local status = self:status_text()
  if status ~= "" then rows[#rows + 1] = M.fit(status, self:cols()) end
  if self.editing then
    local prompt = M.fit(M.PROMPT, self:cols())
    rows[#rows + 1] = prompt .. M.fit_tail(self.input, self:cols() - utf8.len(prompt))
  end
  return rows
end

-- The bytes that take the cursor to the live area's first row and clear it and all below.
function F:erase()
  if self.drawn == 0 then return "" end
  local up = self.drawn > 1 and ("\27[" .. (self.drawn - 1) .. "A") or ""
  return "\r" .. up .. "\27[J"
end

-- The bytes that rewrite, in place, the rows of the live area that differ from what is on
-- screen (same number of rows); the cursor ends after the last row's text, as always.
local function rewrite(shown, rows)
  local out = {}
  local last = #rows
  for k = 1, last do
    if rows[k] ~= shown[k] then
      local up = last - k
      if up > 0 then out[#out + 1] = "\27[" .. up .. "A" end
      out[#out + 1] = "\r\27[2K" .. rows[k]
      if up > 0 then out[#out + 1] = "\27[" .. up .. "B" end
    end
  end
  if #out > 0 and rows[last] == shown[last] then -- back to the end of the last row
    local len = utf8.len(rows[last]) or #rows[last]
    out[#out + 1] = "\r" .. (len > 0 and ("\27[" .. len .. "C") or "")
  end
  return table.concat(out)
end

-- Redraw the live area where it changed (all of it when `force`: after a resize).
function F:redraw(force)
  if not self.tty then return end
  local rows = self:live_rows()
  if not force and #rows == self.drawn then
    local bytes = rewrite(self.shown, rows)
    if bytes ~= "" then self.write(bytes) end
  else
    self.write(self:erase() .. table.concat(rows, "\r\n"))
  end
  self.shown, self.drawn = rows, #rows
end

-- Write text where the live area is, then the live area below it again: text ends up in the
-- scrollback, the status and the typed line stay at the bottom, untouched.
function F:above(text)
  local rows = self:live_rows()
  self.write(self:erase() .. text .. table.concat(rows, "\r\n"))
  self.shown, self.drawn = rows, #rows
end

-- Print a block of text above the status line.
function F:print(text)
  if self.tty then
    self:above(text .. "\n\n")
  else
    self.write(text .. "\n\n")
  end
end

-- The terminal has `cols` columns now (SIGWINCH): the live area is cut again.
function F:resize(cols)
  if type(cols) ~= "number" or cols < 1 or cols == self.width then return end
  self.width = cols
  self:redraw(true)
end

-- A console line that is not a dispatcher answer (thread switched, policy reloaded).
function F:say(text)
  self:print(text)
end

local function show(self, h, msg)
  h.summary = msg.summary
  if msg.final then
    remove(self.live, h)
    local text = msg.text
    if msg.summary == nil then text = "[" .. tostring(h.thread) .. "] " .. text end
    self:print(text)
  else
    if not h.listed then
      h.listed = true
      self.live[#self.live + 1] = h
    end
    self:redraw()
  end
end

function F:post(thread, msg)
  local h = { thread = thread }
  show(self, h, msg)
  return h
end

function F:update(h, msg)
  if h.final then return end
  if msg.final then h.final = true end
  show(self, h, msg)
end

---------------------------------------------------------------------------------------------
-- Input

-- A thread name a person can type: letters, digits and . _ : @ / -
M.THREAD_NAME = "^[%w._:@/-]+$"
M.THREAD_RULE = "letters, digits and . _ : @ / -"

function M.valid_thread(name)
  return type(name) == "string" and name:match(M.THREAD_NAME) ~= nil
end

-- The console's own grammar rows for the dispatcher's help.
M.HELP_EXTRA = { { "/thread NAME", "switch to thread NAME (each thread has its own workspace)" },
                 { "/new", "start a fresh thread" } }

-- A fresh thread's name: the UTC time, and a count when two are made in one second.
function F:fresh_thread()
  local base = "new-" .. os.date("!%Y%m%dT%H%M%S")
  if base == self.last_fresh then
    self.fresh_n = (self.fresh_n or 1) + 1
    return base .. "-" .. self.fresh_n
  end
  self.last_fresh, self.fresh_n = base, 1
  return base
end

-- Lines of standard input, handed to on_line as they complete; the last line may lack its
-- newline. Returns "eof" or "stopped" (stop fired). read(stop) → chunk | nil, err (default
-- core.read_stdin).
function M.read_lines(stop, on_line, read)
  read = read or core.read_stdin
  local pending = ""
  while true do
    local chunk, err = read(stop)
    if chunk == nil then
      if err then return "stopped" end
      if pending ~= "" then on_line(pending) end
      return "eof"
    end
    pending = pending .. chunk
    while true do
      local nl = pending:find("\n", 1, true)
      if not nl then break end
      local line = pending:sub(1, nl - 1)
      pending = pending:sub(nl + 1)
      on_line(line)
    end
  end
end

-- Keys, while the front edits: standard input in raw mode hands over bytes as they are typed.
-- Printable UTF-8 is typed; Backspace (DEL or ^H) removes a character, Ctrl-U the line,
-- Ctrl-W the word before the cursor; Enter (CR, LF, or CR LF as one) submits the line; Ctrl-D
-- on an empty line ends input (elsewhere it does nothing, as in a shell); a tab is a space;
-- escape sequences (arrows, function keys) and other control characters are dropped. Ctrl-C
-- never arrives: the terminal still turns it into SIGINT (core.tty_mode keeps ISIG).

local function drop_last_char(s)
  local i = #s
  while i > 1 and (s:byte(i) & 0xC0) == 0x80 do i = i - 1 end
  return s:sub(1, i - 1)
end

local function drop_last_word(s)
  return (s:gsub("%s+$", ""):gsub("[^%s]+$", ""))
end

-- The input line changed: draw it again (the status line above stays as it is).
function F:typed()
  self:redraw()
end

-- Enter: the line stands in the scrollback on a line of its own, then is handled.
function F:submit(on_line)
  local line = self.input
  self.input = ""
  self:above(M.PROMPT .. table.concat(chars(line)) .. "\r\n")
  on_line(line)
end

-- Feeds one chunk of typed bytes; returns "eof" on Ctrl-D at an empty line.
function F:keys(chunk, on_line)
  local i, n = 1, #chunk
  local changed = false
  while i <= n do
    local c = chunk:sub(i, i)
    local b = c:byte()
    i = i + 1
    if self.esc then
      -- ESC [ params final | ESC O x | ESC x: dropped whole, even across chunks
      self.esc = self.esc .. c
      local e = self.esc
      if #e == 2 and c ~= "[" and c ~= "O" then self.esc = nil
      elseif #e == 3 and e:sub(2, 2) == "O" then self.esc = nil
      elseif #e >= 3 and b >= 0x40 and b <= 0x7E then self.esc = nil
      elseif #e > 32 then self.esc = nil end
    elseif b == 0x1B then
      self.esc = c
    elseif c == "\n" and self.after_cr then
      -- the LF of a CR LF pair: already submitted
    elseif c == "\r" or c == "\n" then
      changed = false -- the submit draws the live area anew
      self:submit(on_line)
    elseif b == 0x04 then
      if self.input == "" then
        self.after_cr = false
        return "eof"
      end
    elseif b == 0x7F or b == 0x08 then
      self.input, changed = drop_last_char(self.input), true
    elseif b == 0x15 then
      self.input, changed = "", true
    elseif b == 0x17 then
      self.input, changed = drop_last_word(self.input), true
    elseif b == 0x09 then
      self.input, changed = self.input .. " ", true
    elseif b >= 0x20 then
      self.input, changed = self.input .. c, true
    end
    self.after_cr = c == "\r"
  end
  if changed then self:typed() end
end

-- Reads keys until Ctrl-D at an empty line ("eof"), the end of input ("eof") or stop
-- ("stopped"), showing the input line meanwhile; at the end the input line goes away.
function F:read_keys(stop, on_line, read)
  read = read or core.read_stdin
  self.editing, self.input, self.esc, self.after_cr = true, "", nil, false
  self:redraw()
  local how
  while true do
    local chunk, err = read(stop)
    if chunk == nil then
      how = err and "stopped" or "eof"
      break
    end
    if self:keys(chunk, on_line) == "eof" then
      how = "eof"
      break
    end
  end
  self.editing, self.input = false, ""
  self:redraw()
  return how
end

-- One typed line: a console command (/thread, /help) or a message for the dispatcher.
-- Returns the message {thread, user, text} to hand on, or nil when the line was handled here.
function F:line(line)
  line = line:gsub("\r$", "")
  local trimmed = line:gsub("^%s+", ""):gsub("%s+$", "")
  if trimmed == "" then return nil end
  local cmd, rest = trimmed:match("^/(%a+)%s*(.-)$")
  if cmd == "thread" then
    if rest == "" then
      self:say("thread: " .. self.thread)
    elseif not M.valid_thread(rest) then
      self:say(("%q is not a thread name: use %s"):format(rest, M.THREAD_RULE))
    else
      self.thread = rest
      self:say("thread: " .. self.thread)
    end
    return nil
  end
  if cmd == "new" then
    self.thread = self:fresh_thread()
    self:say("thread: " .. self.thread .. " (new)")
    return nil
  end
  if cmd and cmd ~= "help" then
    self:say(("/%s is not a console command; there are /thread NAME, /new and /help"):format(cmd))
    return nil
  end
  return { thread = self.thread, user = self.user, text = trimmed }
end

-- Read until input ends or opts.stop fires, handing each message to d:handle.
-- opts: thread (the first one, default main), user, stop (a signal), read (see read_lines)
function F:serve(d, opts)
  opts = opts or {}
  self.thread = opts.thread or self.thread or "main"
  self.user = opts.user or self.user or "console"
  local function on_line(line)
    local msg = self:line(line)
    if msg then d:handle(msg) end
  end
  if self.edit then return self:read_keys(opts.stop, on_line, opts.read) end
  return M.read_lines(opts.stop, on_line, opts.read)
end

-- Leave the terminal on a clean line (at exit).
function F:close()
  if self.tty and self.drawn > 0 then
    self.write(self:erase())
    self.shown, self.drawn = {}, 0
  end
end


-- The front's declaration (fronts/registry.lua): `switchboard console` (commands/console.lua
-- wires it to the host); its settings are policies/timeouts.lua's `console = {…}`.
local S = require("switchboard.policy.schema").S
M.front = {
  name = "console",
  command = "console",
  settings = { timeouts = S.record { refresh_ms = S.ms(100, 60 * 1000), drain_ms = S.ms(0, 10 * 60 * 1000) } },
}

return M
