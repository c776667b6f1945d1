-- The repository's own instructions for agents (AGENTS.md and the names policy lists): read
-- through the thread's executor — the same confined file route as read_file, so the walls and
-- the workspace rules hold — bounded by policy, and put at the end of the system prompt.
--
--   local got = instructions.read(executor, snap, {signal, remaining_ms})
--     → {files = {{path, bytes, used, cut}}, text = "…" | nil, note = "instructions: …" | nil}
--   instructions.append(system_prompt, got) → the prompt with the files at its end
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
    local ok, bytes = pcall(ex.read_file, ex, path, { signal = ctx.signal, remaining_ms = ctx.remaining_ms, snap = snap })
    if ok and type(bytes) == "string" and bytes ~= "" then
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

function M.append(system, got)
  if not (got and got.text) then return system end
  return system .. "\n\n## The repository's instructions for agents\n\nThe repository carries these "
    .. "instruction files; follow them where they apply to the task.\n\n" .. got.text
end

return M
