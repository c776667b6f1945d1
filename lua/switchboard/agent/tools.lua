-- The agent's tools: bash, read_file, write_file and edit_file, each a call on the thread's executor
-- stack (tracing → health → backend; docs/executors.md). What a call returns becomes exactly
-- one tool_result:
--
--   a result (any exit code)        → its rendered text (exit N: …, (no output), the 124 line)
--   a tool error (escape, no file)  → is_error, its message
--   a refusal (run budget spent)    → is_error, "exit 124: run budget exhausted …"
--   an infra error                  → is_error, the sandbox failure; the health tracker counts it
--   a capacity error (fleet busy)   → not an error of the model's: policy's fleet_busy_tool text
--   bad input (not an object, no command) → is_error, what the input lacks
--   a raise (a bug below)           → not caught here: it passes through the run to the one
--                                     catch of the dispatcher's lifecycle, with its traceback
--
--   tools.definitions(snap, agent_def) → the API's `tools` list for the agent
--   edit_file reads and writes the file through the executor's file routes (the same confined
--   paths as read_file/write_file): old_text must occur exactly once unless replace_all; else
--   a tool error saying how often it occurred (and where), or showing the nearest lines.
--   screenshot (agent/screenshot.lua): headless Chromium through the executor; an image block
--   todo_write (agent/todos.lua): the model's plan, shown through ctx.on_todos; no executor
--   tools.call(executor, snap, tool_use, ctx) → {content, is_error, kind, command?, result?, image?}
--     ctx: signal, remaining_ms, attach? (function(image): a screenshot for the page and thread), on_todos?; kind: "result" | "tool" | "refused" | "infra" | "capacity" |
--          "input"
local core = require("switchboard.core")
local budget = require("switchboard.shell.budget")
local text = require("switchboard.agent.text")
local classify = require("switchboard.shell.classify")
local errors = require("switchboard.exec.errors")
local tracing = require("switchboard.exec.tracing")
local find = require("switchboard.agent.find")
local web_fetch = require("switchboard.agent.web_fetch")
local web_search = require("switchboard.agent.web_search")
local screenshot = require("switchboard.agent.screenshot")
local todos = require("switchboard.agent.todos")

local M = {}

local function minutes(ms)
  local m = ms / 60000
  if m == math.floor(m) then return ("%d min"):format(m) end
  return ("%g s"):format(ms / 1000)
end

local DEFS = {}

function DEFS.bash(snap)
  local b = snap.timeouts.bash
  return {
    name = "bash",
    description = ("Run a bash command in the workspace (the repository's checkout is the "
      .. "current directory) and return its exit status and output. Each call has a time "
      .. "limit: %s (%d ms) by default, at most %s (%d ms). When a command needs longer — a "
      .. "build, a full test suite, or a call that came back with exit 124 (timed out) — ask "
      .. "for more time with a larger timeoutMs, up to %d.")
      :format(minutes(b.default_ms), b.default_ms, minutes(b.max_ms), b.max_ms, b.max_ms),
    input_schema = {
      type = "object",
      properties = {
        command = { type = "string", description = "The command, run with bash -c." },
        timeoutMs = { type = "integer", description = ("Time limit in milliseconds (default %d, "
          .. "maximum %d; larger values are cut to the maximum)."):format(b.default_ms, b.max_ms) },
      },
      required = { "command" },
    },
  }
end

function DEFS.read_file(snap)
  return {
    name = "read_file",
    description = ("Read a file of the workspace, its lines numbered as cat -n prints them "
      .. "(the number, a tab, the line; the numbers are not part of the file — leave them out of "
      .. "edit_file's old_text). Without limit at most %d lines from offset (default 1); lines "
      .. "longer than %d characters are cut. The path is relative to the workspace; paths that "
      .. "leave it are refused. An image (PNG, JPEG, GIF, WebP) is shown to you as an image; "
      .. "another binary file is described, not shown."):format(snap.agents.find_tools.read_max_lines,
      snap.agents.find_tools.max_line_chars),
    input_schema = {
      type = "object",
      properties = {
        path = { type = "string", description = "Path relative to the workspace." },
        offset = { type = "integer", description = "The first line to read (1 = the first line)." },
        limit = { type = "integer", description = "How many lines to read from offset." },
      },
      required = { "path" },
    },
  }
end

function DEFS.write_file(snap)
  return {
    name = "write_file",
    description = "Create or replace a file of the workspace with the given content (parent "
      .. "directories are created). The path is relative to the workspace.",
    input_schema = {
      type = "object",
      properties = {
        path = { type = "string", description = "Path relative to the workspace." },
        content = { type = "string", description = "The file's whole new content." },
      },
      required = { "path", "content" },
    },
  }
end

function DEFS.edit_file(snap)
  return {
    name = "edit_file",
    description = "Replace an exact piece of text in a file of the workspace. old_text must "
      .. "occur in the file exactly once — include enough surrounding lines to make it unique — "
      .. "unless replace_all is true, which replaces every occurrence. Whitespace and line "
      .. "breaks must match exactly. Prefer this to write_file for changing part of a file.",
    input_schema = {
      type = "object",
      properties = {
        path = { type = "string", description = "Path relative to the workspace." },
        old_text = { type = "string", description = "The exact text to replace (not empty)." },
        new_text = { type = "string", description = "The text to put in its place." },
        replace_all = { type = "boolean", description = "Replace every occurrence (default false)." },
      },
      required = { "path", "old_text", "new_text" },
    },
  }
end

DEFS.web_fetch = web_fetch.definition
DEFS.web_search = web_search.definition -- nil without a provider in policy: not offered
DEFS.screenshot = screenshot.definition

for name in pairs(find.NAMES) do
  DEFS[name] = function(snap) return find.definitions(snap)[name] end
end

DEFS[todos.NAME] = function() return todos.definition() end

-- Tools that change the workspace: never offered to a readonly agent.
M.WRITE_TOOLS = { write_file = true, edit_file = true }
-- Tools that only read: the calls of one turn that are all of these run at the same time
-- (agent/run.lua); any other call keeps its place in the order.
M.READ_ONLY = { read_file = true, glob = true, grep = true, list = true }
-- Tools whose path is a file read or changed: the first under a subdirectory brings that
-- directory's instruction files into the conversation (agent/instructions.lua nested).
M.TOUCHES_FILE = { read_file = true, write_file = true, edit_file = true }

-- The tools an agent is offered: its policy list, in order, minus the write tools for a
-- readonly agent (the loader already refuses that combination; this is the second lock).
function M.definitions(snap, def)
  local out = {}
  for _, name in ipairs(def.tools or {}) do
    local make = DEFS[name]
    if make and not (def.readonly and M.WRITE_TOOLS[name]) then out[#out + 1] = make(snap) end -- nil: not offered
  end
  if def.mcp then for _, t in ipairs(def.mcp:definitions()) do out[#out + 1] = t end end -- agent/mcp/bridge.lua
  return out
end

function M.offered(snap, def, name)
  for _, t in ipairs(M.definitions(snap, def)) do
    if t.name == name then return true end
  end
  return false
end

local function outcome(kind, content, is_error, extra)
  local o = extra or {}
  o.kind, o.content, o.is_error = kind, content, is_error
  return o
end

local function from_error(snap, err)
  if errors.is_capacity(err) then
    return outcome("capacity", classify.fleet_busy_tool_text(snap, tostring(err)), false, { error = err })
  end
  if errors.is_infra(err) then
    return outcome("infra", "sandbox failure (infrastructure, not the command's exit status): "
      .. tostring(err), true, { error = err })
  end
  if errors.is_refused(err) then
    return outcome("refused", "exit " .. tostring(err.exit_code or 124) .. ": " .. tostring(err), true, { error = err })
  end
  return outcome("tool", tostring(err), true, { error = err })
end

local CALL = {}

function CALL.web_search(_, snap, input, ctx) return web_search.call(snap, input, ctx) end

function CALL.web_fetch(ex, snap, input, ctx)
  local out, err = web_fetch.call(ex, snap, input, ctx)
  if not out then return from_error(snap, err) end
  return outcome(out.kind, out.content, out.is_error)
end

function CALL.bash(ex, snap, input, ctx)
  local command = input.command
  if type(command) ~= "string" or command:match("^%s*$") then
    return outcome("input", "bash needs {\"command\": \"…\"}: the command was missing or empty", true)
  end
  local requested = input.timeoutMs
  local timeout = type(requested) == "number" and budget.clamp(snap, requested) or nil
  local result, err = ex:exec(command, {
    timeout_ms = timeout, signal = ctx.signal, remaining_ms = ctx.remaining_ms, snap = snap,
  })
  if not result then return from_error(snap, err) end
  return outcome("result", result.text or "", false, { result = result })
end

function CALL.read_file(ex, snap, input, ctx)
  if type(input.path) ~= "string" or input.path == "" then
    return outcome("input", "read_file needs {\"path\": \"…\"}", true)
  end
  -- JSON numbers may decode as floats: 40.0 is line 40, 40.5 is refused
  local offset = input.offset ~= nil and math.tointeger(input.offset) or nil
  local limit = input.limit ~= nil and math.tointeger(input.limit) or nil
  if (input.offset ~= nil and not offset) or (input.limit ~= nil and not limit)
      or (offset or 1) < 1 or (limit or 1) < 1 then
    return outcome("input", "read_file: offset and limit are whole numbers of lines, at least 1", true)
  end
  local bytes, err = ex:read_file(input.path, { signal = ctx.signal, remaining_ms = ctx.remaining_ms, snap = snap })
  if bytes == nil then return from_error(snap, err) end
  if bytes == "" then return outcome("result", "(empty file)", false) end
  local media = text.image_type(bytes)
  local limits = snap.agents.tool_output
  local max_image = limits.max_image_bytes
  local w, h
  if media then w, h = text.image_size(bytes, media) end
  if media and (not w or w > limits.max_image_side or h > limits.max_image_side) then
    return outcome("result", ("%s is an image (%s, %d bytes) whose size %s; make a copy at most %d "
      .. "pixels a side (e.g. with ImageMagick's convert -resize) and read that"):format(input.path, media, #bytes,
      w and ("is %d×%d pixels, more than the API takes"):format(w, h) or "could not be read from its header",
      limits.max_image_side), false)
  end
  if media and #bytes <= max_image then
    return outcome("result", {
      { type = "image", source = { type = "base64", media_type = media, data = core.crypto.base64_encode(bytes) } },
      { type = "text", text = ("%s: %s, %d×%d pixels, %d bytes"):format(input.path, media, w, h, #bytes) },
    }, false)
  end
  if media then
    return outcome("result", ("%s is an image (%s) of %d bytes, larger than the %d bytes an image "
      .. "may have here (tool_output.max_image_bytes); make a smaller copy (e.g. with "
      .. "ImageMagick's convert -resize) and read that"):format(input.path, media, #bytes, max_image), false)
  end
  if text.is_binary(bytes) then return outcome("result", text.describe_binary(input.path, bytes), false) end
  return outcome("result", M.lines(snap, bytes, offset or 1, limit), false)
end

-- Lines first .. first+limit-1 of a text, numbered (find.number), at most find_tools.read_max_lines
-- of them. A part of the file is headed by a line saying which lines these are of how many and,
-- when more follow, the offset to read on from; the whole file is just its numbered lines.
function M.lines(snap, bytes, first, limit)
  local f = snap.agents.find_tools
  local want = math.min(limit or f.read_max_lines, f.read_max_lines)
  local body, shown, n = find.number(bytes, first, want, f.max_line_chars)
  if first > n then return ("(the file has %d lines; offset %d is past its end)"):format(n, first) end
  if first == 1 and shown >= n then return body end
  local head = ("[lines %d-%d of %d"):format(first, shown, n)
  if shown < n then
    head = head .. ("; read on with offset %d"):format(shown + 1)
    if not limit or limit > want then head = head .. (" (at most %d lines a call)"):format(f.read_max_lines) end
  end
  return head .. "]\n" .. body
end

function CALL.write_file(ex, snap, input, ctx)
  if type(input.path) ~= "string" or input.path == "" or type(input.content) ~= "string" then
    return outcome("input", "write_file needs {\"path\": \"…\", \"content\": \"…\"}", true)
  end
  local ok, err = ex:write_file(input.path, input.content,
    { signal = ctx.signal, remaining_ms = ctx.remaining_ms, snap = snap })
  if not ok then return from_error(snap, err) end
  return outcome("result", ("wrote %d bytes to %s"):format(#input.content, input.path), false)
end

-- The byte offsets where needle starts in hay (plain text, not overlapping).
local function occurrences(hay, needle)
  local at, pos = {}, 1
  while true do
    local i = hay:find(needle, pos, true)
    if not i then return at end
    at[#at + 1] = i
    pos = i + #needle
  end
end

local function line_of(text, offset)
  local n = 1
  for _ in text:sub(1, offset - 1):gmatch("\n") do n = n + 1 end
  return n
end

local function lines_of(text)
  local out = {}
  for line in (text .. "\n"):gmatch("([^\n]*)\n") do out[#out + 1] = line end
  if text:sub(-1) == "\n" then out[#out] = nil end
  return out
end

-- How alike two lines are: the share of character pairs (bigrams) they have in common.
local function likeness(a, b)
  a, b = a:match("^%s*(.-)%s*$"), b:match("^%s*(.-)%s*$")
  if a == b then return 1 end
  if #a < 2 or #b < 2 then return 0 end
  local pairs_a, n = {}, 0
  for i = 1, #a - 1 do
    local p = a:sub(i, i + 1)
    pairs_a[p] = (pairs_a[p] or 0) + 1
  end
  for i = 1, #b - 1 do
    local p = b:sub(i, i + 1)
    if (pairs_a[p] or 0) > 0 then pairs_a[p] = pairs_a[p] - 1; n = n + 1 end
  end
  return 2 * n / (#a + #b - 2)
end

M.CONTEXT_LINES = 2

-- The file's lines nearest to old_text's first non-blank line, numbered, with context.
function M.nearest(text, old_text)
  local want = old_text:match("[^\n]*%S[^\n]*") or old_text
  local lines = lines_of(text)
  local best, best_i = -1, nil
  for i, line in ipairs(lines) do
    local score = likeness(line, want)
    if score > best then best, best_i = score, i end
  end
  if not best_i or best <= 0 then return "(no line of the file resembles it)" end
  local out = {}
  for i = math.max(1, best_i - M.CONTEXT_LINES), math.min(#lines, best_i + M.CONTEXT_LINES) do
    out[#out + 1] = ("%5d%s %s"):format(i, i == best_i and ">" or " ", lines[i])
  end
  return table.concat(out, "\n")
end

local function replace_at(text, at, old_len, new_text)
  local out, pos = {}, 1
  for _, i in ipairs(at) do
    out[#out + 1] = text:sub(pos, i - 1)
    out[#out + 1] = new_text
    pos = i + old_len
  end
  out[#out + 1] = text:sub(pos)
  return table.concat(out)
end

function CALL.edit_file(ex, snap, input, ctx)
  local path, old, new = input.path, input.old_text, input.new_text
  if type(path) ~= "string" or path == "" or type(old) ~= "string" or type(new) ~= "string" then
    return outcome("input", "edit_file needs {\"path\": \"…\", \"old_text\": \"…\", \"new_text\": \"…\"}", true)
  end
  if old == "" then
    return outcome("input", "edit_file: old_text is empty; to create a file or replace it whole use write_file", true)
  end
  local opts = { signal = ctx.signal, remaining_ms = ctx.remaining_ms, snap = snap }
  local text, err = ex:read_file(path, opts)
  if text == nil then return from_error(snap, err) end
  if text:find("\0", 1, true) or not utf8.len(text) then
    return outcome("tool", ("edit_file: %s is not a text file (it has NUL bytes or is not UTF-8); "
      .. "edit_file only changes text files"):format(path), true)
  end
  local at = occurrences(text, old)
  if #at == 0 then
    return outcome("tool", ("edit_file: old_text occurs 0 times in %s, so nothing was changed. "
      .. "It must match the file exactly, whitespace and line breaks included. The nearest lines:\n%s")
      :format(path, M.nearest(text, old)), true)
  end
  if #at > 1 and input.replace_all ~= true then
    local where = {}
    for i, offset in ipairs(at) do
      if i > 10 then where[#where + 1] = "…"; break end
      where[#where + 1] = tostring(line_of(text, offset))
    end
    return outcome("tool", ("edit_file: old_text occurs %d times in %s (at lines %s), so nothing was "
      .. "changed. Include more of the surrounding lines to make it unique, or set replace_all to "
      .. "true to replace all %d."):format(#at, path, table.concat(where, ", "), #at), true)
  end
  local ok, werr = ex:write_file(path, replace_at(text, at, #old, new), opts)
  if not ok then return from_error(snap, werr) end
  local first = line_of(text, at[1])
  if #at == 1 then
    return outcome("result", ("edited %s: replaced 1 occurrence at line %d"):format(path, first), false)
  end
  return outcome("result", ("edited %s: replaced %d occurrences (the first at line %d)"):format(path, #at, first), false)
end

function CALL.screenshot(ex, snap, input, ctx)
  local out, err = screenshot.call(ex, snap, input, ctx)
  if not out then return from_error(snap, err) end
  return outcome(out.kind, out.content, out.is_error, { image = out.image, result = out.result })
end

-- What reaches the model passes the log's redaction: a repository secret (docs/secrets.md),
-- a GitHub token or any other registered secret a command printed is [redacted] in the
-- tool_result, so no secret is ever sent to the model.
local function scrubbed(out)
  local c = out.content
  if type(c) == "string" then
    out.content = core.log_scrub(c)
  elseif type(c) == "table" then
    for _, block in ipairs(c) do
      if type(block) == "table" and type(block.text) == "string" then block.text = core.log_scrub(block.text) end
    end
  end
  return out
end

-- use: {id, name, input, input_error?}; def: the agent's policy entry.
local function call_tool(ex, snap, def, use, ctx)
  if not M.offered(snap, def, use.name) then
    return outcome("input", ("there is no tool %q for this agent; the tools are: %s"):format(
      tostring(use.name), table.concat(def.tools or {}, ", ")), true)
  end
  if use.input_error then
    return outcome("input", use.name .. " was called with input that is not a JSON object (" .. use.input_error .. ")", true)
  end
  if use.name == todos.NAME then return todos.call(use.input, ctx) end
  if def.mcp and def.mcp:owns(use.name) then
    local out, err = def.mcp:call(ex, snap, use, ctx)
    return out or from_error(snap, err)
  end
  if use.name == "web_fetch" and not (def.resources and def.resources.repository) then
    return CALL.web_fetch(nil, snap, use.input or {}, ctx) -- no sandbox: the bot fetches (agent/web_fetch.lua)
  end
  if find.NAMES[use.name] then
    local out, err = find.call(use.name, ex, snap, use.input or {}, ctx)
    if not out then return from_error(snap, err) end
    return out
  end
  return CALL[use.name](ex, snap, use.input or {}, ctx)
end

-- One tool call, as an agent.tool span (where the executor's spans go) that is the parent of the
-- exec.* spans — and their HTTP requests — the call causes (exec/tracing.lua).
function M.call(ex, snap, def, use, ctx)
  local span = tracing.tool_span(ex, use.name)
  if not span then return scrubbed(call_tool(ex, snap, def, use, ctx)) end
  local done <close> = setmetatable({}, { __close = function(_, err)
    if err ~= nil then span:finish("error", err) end
  end })
  local out = scrubbed(tracing.within(span, call_tool, ex, snap, def, use, ctx))
  span.attributes.outcome = out.kind
  span:finish(out.is_error and "error" or "ok", { kind = out.kind })
  return out
end

-- The first line of a call's command (or its path), for the card.
function M.describe(use)
  local input = type(use.input) == "table" and use.input or {}
  if use.name == "bash" and type(input.command) == "string" then
    return "$ " .. (input.command:match("^%s*([^\n]*)") or "")
  end
  if type(input.pattern) == "string" then
    return use.name .. " " .. input.pattern .. (type(input.path) == "string" and (" in " .. input.path) or "")
  end
  if type(input.path) == "string" then return use.name .. " " .. input.path end
  if type(input.url) == "string" then return use.name .. " " .. input.url end
  return tostring(use.name)
end

return M
