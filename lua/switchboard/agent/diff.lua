-- A run's changes: the workspace's repository against the commit the run started from, new
-- files included, as git's unified diff and a count per file — one command through the
-- executor (the thread's walls and deadlines). The real index is left alone: the new files
-- are added to a copy of it (GIT_INDEX_FILE), so the next run's `git status` is unchanged.
--
--   diff.base(ex, snap, opts) → commit | nil             HEAD when the run starts
--   diff.capture(ex, snap, base, opts) → {files, added, removed, patch, cut} | nil, err
--     files: {{path, added, removed, binary}}; patch: the unified diff, at most max_bytes
--     (policy record.pages.diff_max_bytes; cut = true when it was longer)
--   diff.summary(d) → "+N −M in K files"
--   opts: signal, remaining_ms
local core = require("switchboard.core")

local M = {}

local MARK = "@@switchboard-diff-patch@@"

local function exec(ex, snap, command, opts)
  return ex:exec(command, { timeout_ms = snap.agents.find_tools.timeout_ms, signal = opts.signal,
    remaining_ms = opts.remaining_ms, snap = snap })
end

function M.base(ex, snap, opts)
  local res = exec(ex, snap, "git rev-parse --verify -q HEAD", opts)
  if not res or res.exit_code ~= 0 then return nil end
  return (res.stdout or ""):match("^(%x+)%s*$")
end

function M.command(base, max_bytes)
  return table.concat({
    'i=$(mktemp) || exit 1',
    'cp "$(git rev-parse --git-path index)" "$i" 2>/dev/null',
    'GIT_INDEX_FILE="$i" git add -A . >/dev/null 2>&1',
    ('GIT_INDEX_FILE="$i" git diff --cached --numstat -z --no-renames %s; s=$?'):format(base),
    ('printf "\\n%s\\n"'):format(MARK),
    ('GIT_INDEX_FILE="$i" git diff --cached --no-color --no-ext-diff --no-renames %s | head -c %d'):format(base, max_bytes + 1),
    'rm -f "$i"; exit $s',
  }, "\n")
end

-- numstat -z: "ADDED\tREMOVED\tPATH\0" per file; "-\t-\t" for a binary file.
local function parse_numstat(s)
  local files, added, removed = {}, 0, 0
  for a, r, path in s:gmatch("([%d-]+)\t([%d-]+)\t([^%z]*)%z") do
    local binary = a == "-"
    local f = { path = path, added = tonumber(a) or 0, removed = tonumber(r) or 0, binary = binary or nil }
    added, removed = added + f.added, removed + f.removed
    files[#files + 1] = f
  end
  return files, added, removed
end

function M.capture(ex, snap, base, opts)
  if not base or not base:match("^%x+$") then return nil, core.error("git", "no starting commit") end
  local max = snap.record.pages.diff_max_bytes
  local res, err = exec(ex, snap, M.command(base, max), opts)
  if not res then return nil, err end
  local out = res.stdout or ""
  local at = out:find("\n" .. MARK .. "\n", 1, true)
  if res.exit_code ~= 0 or not at then
    return nil, core.error("git", ("git diff failed (exit %s): %s"):format(tostring(res.exit_code), (res.stderr or ""):sub(1, 500)))
  end
  local files, added, removed = parse_numstat(out:sub(1, at - 1))
  local patch = out:sub(at + #MARK + 2)
  local cut = #patch > max
  if cut then patch = patch:sub(1, max) end
  return { base = base, files = files, added = added, removed = removed, patch = patch, cut = cut or nil }
end

function M.summary(d)
  local n = #d.files
  return ("+%d −%d in %d file%s"):format(d.added, d.removed, n, n == 1 and "" or "s")
end

return M
