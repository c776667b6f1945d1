-- The file tools: read_file, write_file and edit_file, each a call on the thread's executor
-- (its confined file routes: a path outside the workspace is refused there). Declared in the
-- tool registry (agent/tools.lua) by M.TOOLS.
--
--   read_file: the file's lines numbered as cat -n prints them (agent/find.lua number), at most
--     find_tools.read_max_lines; an image as an image block; another binary file described
--   write_file: the whole new content
--   edit_file: old_text must occur exactly once unless replace_all; else a tool error saying
--     how often it occurred (and where), or showing the nearest lines
--   file_tools.lines(snap, bytes, first, limit), file_tools.nearest(text, old_text)
local core = require("switchboard.core")
local text = require("switchboard.agent.text")
local find = require("switchboard.agent.find")
local tool_schema = require("switchboard.agent.tool_schema")

local M = {}

local DEFS, CALL = {}, {}

local function outcome(kind, content, is_error, extra)
  local o = extra or {}
  o.kind, o.content, o.is_error = kind, content, is_error
  return o
end

function DEFS.read_file(snap)
  local f = snap.agents.find_tools
  return tool_schema.tool("read_file", ("Read a file of the workspace, its lines numbered as cat -n prints them "
    .. "(the number, a tab, the line; the numbers are not part of the file — leave them out of "
    .. "edit_file's old_text). Without limit at most %d lines from offset (default 1); lines "
    .. "longer than %d characters are cut. The path is relative to the workspace; paths that "
    .. "leave it are refused. An image (PNG, JPEG, GIF, WebP) is shown to you as an image; "
    .. "another binary file is described, not shown."):format(f.read_max_lines, f.max_line_chars), {
    { "path", "string", "Path relative to the workspace.", required = true },
    { "offset", "integer", "The first line to read (1 = the first line)." },
    { "limit", "integer", "How many lines to read from offset." },
  })
end

function DEFS.write_file()
  return tool_schema.tool("write_file", "Create or replace a file of the workspace with the given content (parent "
    .. "directories are created). The path is relative to the workspace.", {
    { "path", "string", "Path relative to the workspace.", required = true },
    { "content", "string", "The file's whole new content.", required = true },
  })
end

function DEFS.edit_file()
  return tool_schema.tool("edit_file", "Replace an exact piece of text in a file of the workspace. old_text must "
    .. "occur in the file exactly once — include enough surrounding lines to make it unique — "
    .. "unless replace_all is true, which replaces every occurrence. Whitespace and line "
    .. "breaks must match exactly. Prefer this to write_file for changing part of a file.", {
    { "path", "string", "Path relative to the workspace.", required = true },
    { "old_text", "string", "The exact text to replace (not empty).", required = true },
    { "new_text", "string", "The text to put in its place.", required = true },
    { "replace_all", "boolean", "Replace every occurrence (default false)." },
  })
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
  if bytes == nil then return nil, err end
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
  if not ok then return nil, err end
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
  if text == nil then return nil, err end
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
  if not ok then return nil, werr end
  local first = line_of(text, at[1])
  if #at == 1 then
    return outcome("result", ("edited %s: replaced 1 occurrence at line %d"):format(path, first), false)
  end
  return outcome("result", ("edited %s: replaced %d occurrences (the first at line %d)"):format(path, #at, first), false)
end


M.TOOLS = {
  { name = "read_file", reaches = { "executor" }, read_only = true, touches_file = true, policy = "agents.find_tools",
    help = "a file of the workspace, its lines numbered (an image shown as an image)",
    definition = DEFS.read_file, call = CALL.read_file },
  { name = "write_file", reaches = { "executor" }, writes = true, touches_file = true,
    help = "create or replace a file of the workspace",
    definition = DEFS.write_file, call = CALL.write_file },
  { name = "edit_file", reaches = { "executor" }, writes = true, touches_file = true,
    help = "replace an exact piece of text in a file of the workspace",
    definition = DEFS.edit_file, call = CALL.edit_file },
}

return M
