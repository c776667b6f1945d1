-- The console front: the dispatcher's front interface on a terminal or a pipe.
--
-- On a terminal, running asks share one status line at the bottom ("[main] coding running
-- 3s | [ci] review provisioning"), rewritten in place with a carriage return and ANSI
-- clear-line; each final card is printed in full above it. On a pipe (or a file), only final
-- cards and answers are printed, one after another, each followed by a blank line.
-- Answers that are not cards (help, an unknown agent) start with "[thread] " so that a
-- session with several threads stays readable.
--
-- Input: front:serve(d, {thread, user, stop}) reads standard input line by line (through
-- core.read_stdin, which yields the task instead of blocking the loop) and hands each line to
-- the dispatcher as a message of the current thread; `/thread NAME` switches threads.
local core = require("switchboard.core")

local M = {}
local F = {}
F.__index = F

local CLEAR_LINE = "\r\27[2K"

-- opts: tty (boolean: rewrite a status line in place), write (function(bytes); default
-- io.stdout:write + flush)
function M.new(opts)
  opts = opts or {}
  local write = opts.write or function(bytes)
    io.stdout:write(bytes)
    io.stdout:flush()
  end
  return setmetatable({ tty = opts.tty and true or false, write = write, live = {}, status = "" }, F)
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

function F:redraw()
  if not self.tty then return end
  local status = self:status_text()
  if status == self.status then return end
  self.status = status
  self.write(CLEAR_LINE .. status)
end

-- Print a block of text above the status line.
function F:print(text)
  if self.tty then
    self.write(CLEAR_LINE .. text .. "\n\n")
    self.status = ""
    self:redraw()
  else
    self.write(text .. "\n\n")
  end
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
M.HELP_EXTRA = { { "/thread NAME", "switch to thread NAME (each thread has its own workspace)" } }

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
  if cmd and cmd ~= "help" then
    self:say(("/%s is not a console command; there are /thread NAME and /help"):format(cmd))
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
  return M.read_lines(opts.stop, function(line)
    local msg = self:line(line)
    if msg then d:handle(msg) end
  end, opts.read)
end

-- Leave the terminal on a clean line (at exit).
function F:close()
  if self.tty and self.status ~= "" then
    self.write(CLEAR_LINE)
    self.status = ""
  end
end

return M
