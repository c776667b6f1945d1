-- The repository's own instructions for agents (AGENTS.md and the names policy lists): read
-- through the thread's executor — the same confined file route as read_file, so the walls and
-- the workspace rules hold — bounded by policy, and put at the end of the system prompt.
--
--   local got = instructions.read(executor, snap, {signal, remaining_ms})
--     → {files = {{path, bytes, used, cut}}, text = "…" | nil, note = "instructions: …" | nil}
--   instructions.append(system_prompt, got) → the prompt with the files at its end
--   local state = instructions.nested_state()
--   instructions.nested(executor, snap, {path, …}, state, ctx) → {{path, dir, text, bytes, cut}}
--     the instruction files (instructions.nested_files) of the subdirectories above the paths
--     a turn read or changed, each directory looked at once per state; state.used names every
--     file found so far (the card's note)
--   instructions.nested_text(file) → the text block the model gets
--
-- A file that is missing is skipped; one longer than max_file_bytes is cut there (on a UTF-8
-- boundary) with a line saying so, and once max_total_bytes are used the rest are cut or
-- left out with such a line: never dropped silently. A file that is not text is left out with
-- a note.
local M = {}

local function continuation(text, i)
  local b = text:byte(i)
  return b ~= nil and b >= 0x80 and b < 0xC0
end

-- The first n bytes of text, moved back to a UTF-8 boundary.
function M.head(text, n)
  if #text <= n then return text end
  while n > 0 and continuation(text, n + 1) do n = n - 1 end
  return text:sub(1, n)
end

local function kib(n)
  if n % 1024 == 0 then return ("%d KiB"):format(n // 1024) end
  return ("%d bytes"):format(n)
end

function M.read(ex, snap, ctx)
  local pol = snap.agents.instructions
  local left = pol.max_total_bytes
  local out, parts, names = { files = {} }, {}, {}
  for _, path in ipairs(pol.files) do
    local bytes = ex:read_file(path, { signal = ctx.signal, remaining_ms = ctx.remaining_ms, snap = snap })
    if type(bytes) == "string" and bytes ~= "" then
      local entry = { path = path, bytes = #bytes }
      if bytes:find("\0", 1, true) or not utf8.len(bytes) then
        entry.skipped = "not UTF-8 text"
        names[#names + 1] = path .. " (left out: not text)"
      elseif left <= 0 then
        entry.skipped = "over max_total_bytes"
        names[#names + 1] = path .. " (left out: instructions.max_total_bytes used)"
        parts[#parts + 1] = ("### %s\n[left out: the instruction files before it used instructions.max_total_bytes (%s) in policies/agents.lua]")
          :format(path, kib(pol.max_total_bytes))
      else
        local limit = math.min(pol.max_file_bytes, left)
        local text = M.head(bytes, limit)
        entry.used = #text
        local label = path
        if #text < #bytes then
          entry.cut = true
          local which = limit == pol.max_file_bytes and ("instructions.max_file_bytes (%s)"):format(kib(pol.max_file_bytes))
            or ("instructions.max_total_bytes (%s)"):format(kib(pol.max_total_bytes))
          text = text .. ("\n[cut here: %s is %d bytes; only the first %d are shown (%s in policies/agents.lua). Read the rest with read_file if you need it.]")
            :format(path, #bytes, #text, which)
          label = ("%s (cut to %d of %d bytes)"):format(path, entry.used, #bytes)
        end
        left = left - entry.used
        names[#names + 1] = label
        parts[#parts + 1] = "### " .. path .. "\n" .. text
      end
      out.files[#out.files + 1] = entry
    end
  end
  if #parts > 0 then
    out.text = table.concat(parts, "\n\n")
  end
  if #names > 0 then out.note = "instructions: " .. table.concat(names, ", ") end
  return out
end

-- A new nested state; after a compaction's summary, one that remembers the files used (for
-- the card) but looks at every directory again.
function M.nested_state(old)
  return { seen = {}, used = old and old.used or {}, named = old and old.named or {} }
end

-- The directories above a workspace path, outermost first, the root left out (its files are
-- in the system prompt). nil for a path that is absolute or leaves the workspace.
local function dirs_above(path)
  if type(path) ~= "string" or path:sub(1, 1) == "/" then return nil end
  local parts = {}
  for part in path:gmatch("[^/]+") do
    if part == ".." then return nil end
    if part ~= "." then parts[#parts + 1] = part end
  end
  local out, dir = {}, nil
  for i = 1, #parts - 1 do
    dir = dir and (dir .. "/" .. parts[i]) or parts[i]
    out[#out + 1] = dir
  end
  return out
end

function M.nested(ex, snap, paths, state, ctx)
  local pol = snap.agents.instructions
  local found = {}
  for _, path in ipairs(paths) do
    for _, dir in ipairs(dirs_above(path) or {}) do
      if not state.seen[dir] and not dir:match("^%.git/") and dir ~= ".git" then
        state.seen[dir] = true
        for _, name in ipairs(pol.nested_files) do
          local file = dir .. "/" .. name
          local bytes = ex:read_file(file, { signal = ctx.signal, remaining_ms = ctx.remaining_ms, snap = snap })
          if type(bytes) == "string" and bytes ~= "" and not bytes:find("\0", 1, true) and utf8.len(bytes) then
            local text = M.head(bytes, pol.max_file_bytes)
            local entry = { path = file, dir = dir, bytes = #bytes, used = #text, cut = #text < #bytes or nil }
            if entry.cut then
              text = text .. ("\n[cut here: %s is %d bytes; only the first %d are shown (instructions.max_file_bytes in policies/agents.lua). Read the rest with read_file if you need it.]")
                :format(file, #bytes, #text)
            end
            entry.text = text
            found[#found + 1] = entry
            if not state.named[file] then
              state.named[file] = true
              state.used[#state.used + 1] = file
            end
          end
        end
      end
    end
  end
  return found
end

-- The directories whose instruction files a conversation already carries (a follow-up's
-- history): they are not added again.
function M.nested_seen_in(state, messages)
  for _, m in ipairs(messages or {}) do
    if m.role == "user" and type(m.content) == "table" then
      for _, b in ipairs(m.content) do
        if type(b) == "table" and b.type == "text" and type(b.text) == "string" then
          local dir = b.text:match("^%[The instructions in %S+ apply to the files under (%S+)/ ")
          if dir then state.seen[dir] = true end
        end
      end
    end
  end
  return state
end

function M.nested_text(f)
  return ("[The instructions in %s apply to the files under %s/ — follow them there, in "
    .. "addition to the repository's:]\n%s"):format(f.path, f.dir, f.text)
end

function M.append(system, got)
  if not (got and got.text) then return system end
  return system .. "\n\n## The repository's instructions for agents\n\nThe repository carries these "
    .. "instruction files; follow them where they apply to the task.\n\n" .. got.text
end

return M
