-- Failure classification (docs/contract.md#failure and #capacity) applying the rules of a policy snapshot.
-- Every function takes the snapshot the work captured as its first argument.

local rule = require("switchboard.policy.rule")
local template = require("switchboard.policy.template")

local M = {}

-- The machine token a sandbox server puts in `reason` for a full fleet (wire protocol).
M.FLEET_BUSY_REASON = "fleet-busy"

local function msg(snap, name, vars)
  return template.fill(snap.errors.messages[name], vars or {})
end
M.message = msg

local function seconds(ms)
  return math.floor(ms / 1000 + 0.5)
end
M.seconds = seconds

-- thrownShape: {name?, message?, code?} from an error object, a plain table or a string.
M.shape = rule.shape

-- thrownText: the message verbatim (trimmed) when there is one; otherwise a text naming the
-- error's name and code with the rollout hint. Never empty.
local function text_of_shape(snap, s)
  local message = s.message and rule.trim(s.message) or ""
  if message ~= "" then return message end
  local detail
  if s.name and rule.trim(s.name) ~= "" then
    detail = rule.trim(s.name)
  else
    detail = msg(snap, "thrown_no_name")
  end
  if s.code and rule.trim(s.code) ~= "" then detail = detail .. ", code " .. rule.trim(s.code) end
  return msg(snap, "thrown_no_message", { detail = detail })
end

function M.thrown_text(snap, err)
  return text_of_shape(snap, rule.shape(err))
end

-- isFleetBusy: the recognized texts only.
function M.is_fleet_busy(snap, text)
  return snap.errors.fleet_busy:match_text(text)
end

-- isFleetBusyError: the typed error by name or code first, then the texts.
function M.is_fleet_busy_error(snap, err)
  return snap.errors.fleet_busy:match(err)
end

-- isRecycleError: the typed recycle errors by name, else the recycle-shaped texts.
function M.is_recycle_error(snap, err)
  return snap.errors.recycle:match(err)
end

-- isContainerStarting: a booting container's answer, and nothing else.
function M.is_container_starting(snap, err)
  return snap.errors.container_starting:match(err)
end

-- An in-body error that is present (a string) but empty or blank.
function M.is_empty_error(snap, value)
  return type(value) == "string" and snap.errors.empty_error:match_text(value)
end

function M.is_runtime_replaced(snap, err)
  return snap.errors.runtime_replaced:match(err)
end

-- consecutive: runtime replacements in a row including this one, with no success between.
function M.runtime_replaced_is_infra(snap, consecutive)
  return consecutive >= snap.errors.runtime_replaced_infra_after
end

-- The literal start of the reworded message (it changes only with a reload).
local last_template, last_prefix
local function reworded_prefix(template_text)
  if template_text ~= last_template then
    last_template, last_prefix = template_text, template_text:match("^(.-){") or ""
  end
  return last_prefix
end

-- recycledMidCommandMessage: a typed recycle error at any elapsed time, or a recycle-shaped
-- text more than the threshold into the attempt, is reworded; anything else comes back as
-- thrown_text unchanged. elapsed_ms is per attempt.
function M.recycled_mid_command_message(snap, elapsed_ms, err)
  local s = rule.shape(err)
  local original = text_of_shape(snap, s)
  local prefix = reworded_prefix(snap.errors.messages.recycled_mid_command)
  if prefix ~= "" and original:sub(1, #prefix) == prefix then return original end
  local r = snap.errors.recycle
  local typed = r:match_name(s)
  local late = type(elapsed_ms) == "number" and elapsed_ms > snap.timeouts.recycle.threshold_ms
  if typed or (late and r:match_text(s.message)) then
    return msg(snap, "recycled_mid_command", {
      seconds = seconds(elapsed_ms or 0), original = original,
    })
  end
  return original
end

-- The code an infra failure's span carries. situation: timeout | http | inbody | attach |
-- runtime_replaced.
function M.span_code(snap, situation, status)
  local t = snap.errors.span_codes[situation]
  if t == nil then error("classify.span_code: unknown situation " .. tostring(situation), 2) end
  return template.fill(t, { status = status })
end

-- The answers a sandbox server gives when its fleet is full (docs/contract.md#capacity): /exec finishes its
-- body with the dual in-body shape; /read and /write answer 503 with this body.
function M.fleet_busy_exec_answer(snap, err)
  local text = msg(snap, "fleet_busy_answer", { cause = M.thrown_text(snap, err) })
  return { error = text, reason = M.FLEET_BUSY_REASON, stdout = "", stderr = text, exitCode = 127 }
end

function M.fleet_busy_http_answer(snap, err)
  local text = msg(snap, "fleet_busy_answer", { cause = M.thrown_text(snap, err) })
  return 503, { error = text, reason = M.FLEET_BUSY_REASON }
end

-- The executor side matches the machine token only (an older server's bare text stays infra).
function M.is_fleet_busy_answer(body)
  return type(body) == "table" and body.reason == M.FLEET_BUSY_REASON
end

-- ExecCapacityError's text, naming the seconds waited.
function M.capacity_message(snap, waited_ms)
  return msg(snap, "capacity", { seconds = seconds(waited_ms) })
end

-- What the model reads for a capacity error.
function M.fleet_busy_tool_text(snap, message)
  return msg(snap, "fleet_busy_tool", { message = message })
end

-- Classify an /exec answer body {stdout, stderr, exitCode, error?, reason?}:
--   {verdict="result"}                      no error key: an ordinary command result
--   {verdict="fleet_busy", message}         reason "fleet-busy": wait and re-send
--   {verdict="container_starting", message} re-send once after the retry pause
--   {verdict="infra", message, code}        anything else; a recycle past the threshold reworded
-- (a verdict says what to do next; error kinds are exec/errors.lua's)
function M.exec_answer(snap, body, elapsed_ms)
  if type(body) ~= "table" or body.error == nil then return { verdict = "result" } end
  if M.is_fleet_busy_answer(body) then
    return { verdict = "fleet_busy", message = M.thrown_text(snap, body.error) }
  end
  if M.is_empty_error(snap, body.error) then
    return { verdict = "infra", message = msg(snap, "empty_error"), code = M.span_code(snap, "inbody") }
  end
  local err = body.error
  if type(err) ~= "table" then err = { name = body.name, code = body.code, message = body.error } end
  if M.is_container_starting(snap, err) then
    return { verdict = "container_starting", message = M.thrown_text(snap, err) }
  end
  return {
    verdict = "infra",
    message = M.recycled_mid_command_message(snap, elapsed_ms, err),
    code = M.span_code(snap, "inbody"),
  }
end

return M
