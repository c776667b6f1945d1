-- The tools an agent finds its way with in a large repository — glob, grep and list — and
-- the bounds read_file shares with them (policies/agents.lua find_tools). Each call is one
-- command through the thread's executor, exactly like bash: it runs in the thread's
-- workspace behind the same walls and under the same deadlines (the run's hard stop, its
-- remaining wall clock, the budget clamp), never on the bot's host. glob and grep are ripgrep
-- (Debian's `ripgrep`), which honours .gitignore and skips .git/.
--
--   find.definitions(snap) → {glob = def, grep = def, list = def}
--   find.call(name, ex, snap, input, ctx) → {kind, content, is_error}
--   find.number(bytes, first, limit, max_line_chars) → text as `cat -n` prints it

local core = require("switchboard.core")
local tool_schema = require("switchboard.agent.tool_schema")
local M = {}

local function quote(s) return "'" .. tostring(s):gsub("'", "'\\''") .. "'" end

-- Lines first .. first+limit-1 of a text, numbered as `cat -n` does (a tab after the number),
-- each cut at max_line_chars. Returns the text, the last line shown and the file's line count.
function M.number(bytes, first, limit, max_line_chars)
  local out, n = {}, 0
  local last = first + limit - 1
  local shown = first - 1
  for line in bytes:gmatch("([^\n]*)\n?") do -- "a\nb\n" and "a\nb" both give 2 lines
    n = n + 1
    if n >= first and n <= last then
      if #line > max_line_chars then
        local keep = line:sub(1, max_line_chars)
        while #keep > 0 and (keep:byte(-1) or 0) >= 0x80 and (keep:byte(-1) or 0) < 0xC0 do keep = keep:sub(1, -2) end
        line = keep .. (" … [line cut: %d more bytes]"):format(#line - #keep)
      end
      out[#out + 1] = ("%6d\t%s"):format(n, line)
      shown = n
    end
  end
  return table.concat(out, "\n"), shown, n
end

local DEFS = {}

function DEFS.glob(snap)
  return tool_schema.tool("glob", ("Find files by name pattern (a glob such as **/*.go or src/**/test_*.py), "
    .. "newest first. Files ignored by .gitignore and .git/ are left out. At most %d paths; "
    .. "narrow the pattern or the directory for more."):format(snap.agents.find_tools.glob_max_paths), {
    { "pattern", "string", "The glob, matched against paths relative to path.", required = true },
    { "path", "string", "The directory to search (default: the workspace)." },
  })
end

function DEFS.grep(snap)
  local f = snap.agents.find_tools
  return tool_schema.tool("grep", ("Search file contents with a regular expression (ripgrep's syntax) and get "
    .. "path:line:text for each match, with context lines if asked. Honours .gitignore; "
    .. "filter files with glob (e.g. *.ts) or type (e.g. go, py, js). At most %d lines of "
    .. "output; files_only lists only the files that match."):format(f.grep_max_lines), {
    { "pattern", "string", "The regular expression.", required = true },
    { "path", "string", "A file or directory to search (default: the workspace)." },
    { "glob", "string", "Only files whose path matches this glob." },
    { "type", "string", "Only files of this ripgrep type (go, py, js, rust, …)." },
    { "context", "integer", ("Lines of context before and after each match (at most %d)."):format(f.grep_max_context) },
    { "ignore_case", "boolean", "Match case-insensitively." },
    { "files_only", "boolean", "List the matching files instead of the lines." },
  })
end

function DEFS.list(snap)
  return tool_schema.tool("list", ("List a directory's entries with their kind (file, dir, link) and size in "
    .. "bytes, sorted by name (.git/ left out). At most %d entries."):format(snap.agents.find_tools.list_max_entries), {
    { "path", "string", "The directory (default: the workspace)." },
  })
end

function M.definitions(snap)
  return { glob = DEFS.glob(snap), grep = DEFS.grep(snap), list = DEFS.list(snap) }
end

-- A path the model gave: relative to the workspace and never leaving it. nil, a core.error of
-- kind "input" (what the model's input lacks) otherwise.
local function safe_path(p)
  if p == nil or p == "" then return "." end
  if type(p) ~= "string" then return nil, core.error("input", "path must be a string") end
  if p:sub(1, 1) == "/" then return nil, core.error("input", "path must be relative to the workspace, got " .. p) end
  for part in p:gmatch("[^/]+") do
    if part == ".." then return nil, core.error("input", "path may not leave the workspace (..): " .. p) end
  end
  if p:find("[%z\n]") then return nil, core.error("input", "path has a NUL or a line break") end
  return p
end

local SCRIPT = {}

-- Newest first: ripgrep sorts by modification time; head bounds the list, one line more
-- than the bound tells that there were more.
function SCRIPT.glob(input, f)
  if type(input.pattern) ~= "string" or input.pattern == "" then return nil, core.error("input", "glob needs {\"pattern\": \"…\"}") end
  local path, why = safe_path(input.path)
  if not path then return nil, why end
  return ("cd -- %s && rg --files --hidden -g '!.git' --glob %s --sortr modified 2>&1 | head -n %d")
    :format(quote(path), quote(input.pattern), f.glob_max_paths + 1)
end

function SCRIPT.grep(input, f)
  if type(input.pattern) ~= "string" or input.pattern == "" then return nil, core.error("input", "grep needs {\"pattern\": \"…\"}") end
  local path, why = safe_path(input.path)
  if not path then return nil, why end
  local args = { "rg", "--no-heading", "--color=never", "--hidden", "-g", quote("!.git"),
                 "--max-columns", tostring(f.max_line_chars), "--max-columns-preview" }
  if input.files_only == true then
    args[#args + 1] = "--files-with-matches"
  else
    args[#args + 1] = "--line-number"
    local c = math.tointeger(input.context)
    if c and c > 0 then args[#args + 1] = "-C " .. math.min(c, f.grep_max_context) end
  end
  if input.ignore_case == true then args[#args + 1] = "--ignore-case" end
  if type(input.glob) == "string" and input.glob ~= "" then args[#args + 1] = "--glob " .. quote(input.glob) end
  if type(input.type) == "string" and input.type ~= "" then
    if not input.type:match("^[%w_+-]+$") then return nil, core.error("input", "type is a ripgrep type name such as go or py") end
    args[#args + 1] = "--type " .. input.type
  end
  args[#args + 1] = "-e " .. quote(input.pattern) .. " -- " .. quote(path)
  -- rg exits 1 for no match and 2 for an error: say which, after the bounded output
  return table.concat(args, " ") .. (" 2>&1 | head -n %d; echo \"@@rg ${PIPESTATUS[0]}\""):format(f.grep_max_lines + 1)
end

function SCRIPT.list(input, f)
  local path, why = safe_path(input.path)
  if not path then return nil, why end
  return ("cd -- %s && find . -mindepth 1 -maxdepth 1 ! -name .git -printf '%%y %%s %%P\\n' | LC_ALL=C sort -k3 | head -n %d")
    :format(quote(path), f.list_max_entries + 1)
end

local function bounded(lines, max, what)
  if #lines <= max then return table.concat(lines, "\n") end
  return table.concat(lines, "\n", 1, max) .. ("\n[more than %d %s: narrow the search]"):format(max, what)
end

local function split(s)
  local out = {}
  for line in (s or ""):gmatch("[^\n]+") do out[#out + 1] = line end
  return out
end

local SHOW = {}

function SHOW.glob(out, f, input)
  local lines = split(out)
  if #lines == 0 then return ("no file matches %s"):format(input.pattern) end
  return bounded(lines, f.glob_max_paths, "paths")
end

function SHOW.grep(out, f, input)
  local status = out:match("@@rg (%d+)%s*$")
  out = out:gsub("@@rg %d+%s*$", "")
  local lines = split(out)
  for i, line in ipairs(lines) do lines[i] = line:gsub("^%./", "") end -- the path ".": paths as glob shows them
  if status == "1" and #lines == 0 then return ("no match for %s"):format(input.pattern) end
  if status == "2" then return "grep failed: " .. bounded(lines, 20, "lines"), true end
  return bounded(lines, f.grep_max_lines, "lines")
end

local KIND = { d = "dir", f = "file", l = "link" }

function SHOW.list(out, f)
  local lines = split(out)
  if #lines == 0 then return "(empty directory)" end
  local rows = {}
  for i, line in ipairs(lines) do
    if i > f.list_max_entries then break end
    local k, size, name = line:match("^(%S) (%d+) (.*)$")
    if k then
      rows[#rows + 1] = k == "d" and ("dir   %s/"):format(name)
        or ("%-5s %s  %s bytes"):format(KIND[k] or k, name, size)
    end
  end
  if #lines > f.list_max_entries then rows[#rows + 1] = ("[more than %d entries]"):format(f.list_max_entries) end
  return table.concat(rows, "\n")
end

-- result: the executor's {exit_code, stdout, stderr, text, aborted}.
function M.call(name, ex, snap, input, ctx)
  local f = snap.agents.find_tools
  local command, why = SCRIPT[name](input, f)
  if not command then return { kind = "input", content = name .. ": " .. tostring(why), is_error = true } end
  local result, err = ex:exec(command, {
    timeout_ms = f.timeout_ms, signal = ctx.signal, remaining_ms = ctx.remaining_ms, snap = snap,
  })
  if not result then return nil, err end
  if result.aborted or result.exit_code == 124 then
    return { kind = "result", content = result.text or "", is_error = false, result = result }
  end
  local out = result.stdout or ""
  if result.exit_code ~= 0 then
    -- cd failed (no such directory) or find refused: the command's own words
    return { kind = "tool", content = ("%s: %s"):format(name, ((result.stderr or "") .. out):match("^%s*(.-)%s*$")),
             is_error = true }
  end
  local content, is_error = SHOW[name](out, f, input)
  return { kind = is_error and "tool" or "result", content = content, is_error = is_error or false, result = result }
end

M.NAMES = { glob = true, grep = true, list = true }

local HELP = { glob = "file paths by glob pattern, newest first", grep = "file contents by regular expression (ripgrep)",
               list = "a directory's entries with kinds and sizes" }
M.TOOLS = {}
for _, name in ipairs({ "glob", "grep", "list" }) do
  M.TOOLS[#M.TOOLS + 1] = { name = name, reaches = { "executor" }, read_only = true, policy = "agents.find_tools",
    help = HELP[name], definition = DEFS[name],
    call = function(ex, snap, input, ctx) return M.call(name, ex, snap, input, ctx) end }
end

return M
