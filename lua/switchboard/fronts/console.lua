-- The console front: the dispatcher's front interface on a terminal or a pipe.
--
-- On a terminal, running asks share one status line at the bottom ("[main] coding running
-- 3s | [ci] review provisioning"), rewritten in place with a carriage return and ANSI
-- clear-line; each final card is printed in full above it. On a pipe (or a file), only final
-- cards and answers are printed, one after another, each followed by a blank line.
-- Answers that are not cards (help, an unknown agent) start with "[thread] " so that a
-- session with several threads stays readable.
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

-- Leave the terminal on a clean line (at exit).
function F:close()
  if self.tty and self.status ~= "" then
    self.write(CLEAR_LINE)
    self.status = ""
  end
end

return M
