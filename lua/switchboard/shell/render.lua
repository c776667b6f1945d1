-- The text a tool result shows the model (docs/contract.md#failure-result, #timeout-exit-124,
-- #hard-stop, #timeout-run-clip).
--   exit 0 with output     → the output
--   exit 0 without output  → (no output)
--   nonzero                → exit N: <output>            (a result, never an error)
--   a deadline kill        → exit 124: <output> + a line naming the limit, timeoutMs and its max
--   a hard stop            → <output> + a stop line      (never 124)
--   truncated output       → a marker line per stream
--   a clipped budget       → the "[timeout clipped to …]" line at the end

local template = require("switchboard.policy.template")

local M = {}

local function seconds(ms) return math.floor(ms / 1000 + 0.5) end

-- The stderr line of a deadline kill. where: "sandbox", "local shell", …
function M.timeout_line(snap, limit_ms, where)
  return template.fill(snap.errors.messages.timeout, {
    where = where or "shell", seconds = seconds(limit_ms), limit_ms = limit_ms,
    max_ms = snap.timeouts.bash.max_ms,
  })
end

local function output_of(r)
  local out, err = r.stdout or "", r.stderr or ""
  if out ~= "" and err ~= "" and out:sub(-1) ~= "\n" then out = out .. "\n" end
  return ((out .. err):gsub("\n+$", ""))
end

local function truncated_streams(t)
  if t == true then return { "output" } end
  local out = {}
  if type(t) == "table" then
    for _, s in ipairs({ "stdout", "stderr" }) do
      if t[s] then out[#out + 1] = s end
    end
  end
  return out
end

-- r: {exit_code (or exit), stdout, stderr, timed_out, aborted, abort_reason, truncated,
--     limit_ms (the budget that fired), where, clip_line}
function M.text(snap, r)
  local messages = snap.errors.messages
  local code = r.exit_code
  if code == nil then code = r.exit end
  local lines = {}
  local out = output_of(r)
  if out ~= "" then lines[#lines + 1] = out end
  if r.timed_out and not r.aborted then
    code = 124
    lines[#lines + 1] = M.timeout_line(snap, r.limit_ms or snap.timeouts.bash.default_ms, r.where)
  end
  for _, stream in ipairs(truncated_streams(r.truncated)) do
    lines[#lines + 1] = template.fill(messages.truncated, {
      stream = stream, limit = r.max_output or snap.timeouts.process.max_output_bytes,
    })
  end
  if r.aborted then
    lines[#lines + 1] = template.fill(messages.stopped, { reason = r.abort_reason or "hard stop" })
  end
  if r.clip_line then lines[#lines + 1] = r.clip_line end
  local body = table.concat(lines, "\n")

  if r.aborted then
    if type(code) == "number" and code ~= 0 and code ~= 124 then
      return "exit " .. code .. ": " .. body
    end
    return body
  end
  if code == 0 then
    if body == "" then return messages.no_output end
    if out == "" then return messages.no_output .. "\n" .. body end
    return body
  end
  if body == "" then return "exit " .. tostring(code) .. ":" end
  return "exit " .. tostring(code) .. ": " .. body
end

-- Fill result.text in place and return the result.
function M.result(snap, r)
  r.text = M.text(snap, r)
  return r
end

-- The text of a refused command (run budget exhausted): exit 124 with the refusal.
function M.refused(err)
  return "exit " .. tostring(err.exit_code or 124) .. ": " .. err.message
end

return M
