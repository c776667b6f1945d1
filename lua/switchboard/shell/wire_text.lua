-- Command output on the wire (docs/contract.md#wire-protocol, docs/sandboxd.md): JSON strings must be
-- UTF-8, command output is bytes. A stream that is valid UTF-8 goes as it is. One that is not is
-- sent twice: `stdout` (or `stderr`) carries the text with every invalid byte replaced by U+FFFD,
-- so an old client and a strict JSON decoder read a valid answer, and `stdoutBase64` (or
-- `stderrBase64`) carries the exact bytes, which the executor puts back. Pure: no engine calls.
local core = require("switchboard.core")

local M = {}

M.STREAMS = { "stdout", "stderr" }
local REPLACEMENT = "\u{FFFD}"

-- True when s is valid UTF-8 (no overlong forms, no surrogates, nothing past U+10FFFF).
function M.valid(s)
  return utf8.len(s) ~= nil
end

-- s with each byte that does not start a valid UTF-8 sequence replaced by U+FFFD.
function M.lossy(s)
  local out, at = {}, 1
  while at <= #s do
    local n, bad = utf8.len(s, at)
    if n then
      out[#out + 1] = s:sub(at)
      break
    end
    out[#out + 1] = s:sub(at, bad - 1)
    out[#out + 1] = REPLACEMENT
    at = bad + 1
  end
  return table.concat(out)
end

-- In place, on the server: the streams of a result document made safe for JSON.
function M.encode(doc)
  for _, name in ipairs(M.STREAMS) do
    local s = doc[name]
    if type(s) == "string" and not M.valid(s) then
      doc[name] = M.lossy(s)
      doc[name .. "Base64"] = core.crypto.base64_encode(s)
    end
  end
  return doc
end

-- The JSON text of a result document on the server (M.encode, then JSON). A success document
-- ({stdout, stderr, exitCode, durationMs}) is written here with the streams as C-encoded
-- literals (core.json_string: escaping and the UTF-8 check in one pass, issue 28); any other
-- document goes through json (core.json) after M.encode.
local SUCCESS_KEYS = { stdout = "string", stderr = "string", exitCode = "number", durationMs = "number" }

local function is_success(doc)
  local n = 0
  for k, v in pairs(doc) do
    if SUCCESS_KEYS[k] ~= type(v) or (type(v) == "number" and math.type(v) ~= "integer") then return false end
    n = n + 1
  end
  return n == 4
end

-- The literal of each stream of a success document, and whether it was valid UTF-8.
local function literals(doc, names)
  local lit, valid = {}, {}
  for _, name in ipairs(names) do lit[name], valid[name] = core.json_string(doc[name]) end
  return lit, valid
end

local function base64_field(name, bytes)
  return ',"' .. name .. 'Base64":"' .. core.crypto.base64_encode(bytes) .. '"'
end

-- The JSON text of a result document as pieces in order (their concatenation is answer_json's):
-- a server writes a long answer piece by piece, without one more copy of the output.
function M.answer_parts(doc, json)
  if not is_success(doc) then return { json.encode(M.encode(doc)) } end
  local lit, valid = literals(doc, M.STREAMS)
  local out = { '{"exitCode":', tostring(doc.exitCode), ',"durationMs":', tostring(doc.durationMs) }
  for _, name in ipairs(M.STREAMS) do
    out[#out + 1] = ',"' .. name .. '":'
    out[#out + 1] = lit[name]
  end
  for _, name in ipairs(M.STREAMS) do
    if not valid[name] then out[#out + 1] = base64_field(name, doc[name]) end
  end
  out[#out + 1] = "}"
  return out
end

-- The same document when its stdout was already sent as it came (sandboxd's exec lane,
-- docs/sandboxd.md "A long answer as it comes"): the text that follows `{"stdout":"…"`, as
-- pieces; stdout_valid says whether the stdout sent was valid UTF-8 (its exact bytes then
-- follow as stdoutBase64, as in the whole document). doc.stdout is what was sent.
function M.answer_tail_parts(doc, json, stdout_valid)
  if not is_success(doc) then
    local rest = {}
    for k, v in pairs(doc) do if k ~= "stdout" then rest[k] = v end end
    M.encode(rest)
    if not stdout_valid then rest.stdoutBase64 = core.crypto.base64_encode(doc.stdout) end
    local text = json.encode(rest) -- "{…}": its fields follow stdout's
    return { text == "{}" and "}" or "," .. text:sub(2) }
  end
  local lit, valid = literals(doc, { "stderr" })
  local out = { ',"stderr":', lit.stderr, ',"exitCode":', tostring(doc.exitCode),
    ',"durationMs":', tostring(doc.durationMs) }
  if not stdout_valid then out[#out + 1] = base64_field("stdout", doc.stdout) end
  if not valid.stderr then out[#out + 1] = base64_field("stderr", doc.stderr) end
  out[#out + 1] = "}"
  return out
end

function M.answer_json(doc, json)
  return table.concat(M.answer_parts(doc, json))
end

-- In place, on the executor: the exact bytes back where the server sent them alongside.
function M.decode(doc)
  for _, name in ipairs(M.STREAMS) do
    local b64 = doc[name .. "Base64"]
    if type(b64) == "string" then
      local bytes = core.crypto.base64_decode(b64)
      if bytes then doc[name] = bytes end
    end
  end
  return doc
end

return M
