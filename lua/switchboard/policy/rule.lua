-- Classification rules: the data behind policies/errors.lua.
--
-- A rule recognizes a failure by its error name, its error code, or its text:
--   rule{ names = {...}, codes = {...}, texts = {...}, patterns = {...},
--         matches = {examples...}, rejects = {examples...} }
-- names and codes compare exactly; texts are plain substrings compared without regard to case;
-- patterns are Lua patterns (case-sensitive). An example is a string (a message) or a table
-- {name=, code=, message=} (a thrown value). Every rule must ship at least one example it
-- matches and one it rejects; the loader runs them all and refuses the policy if one fails.
--
-- Input text is cut to MAX_MATCH_BYTES before matching: error texts come from the sandbox,
-- and a pattern runs in C where no instruction budget can stop it.

local M = {}

M.MAX_MATCH_BYTES = 8192

local Rule = {}
Rule.__index = Rule
M.Rule = Rule

local LIST_FIELDS = { names = true, codes = true, texts = true, patterns = true }
local EXAMPLE_FIELDS = { matches = true, rejects = true }

-- The bytes %s matches (isspace in the C locale).
local SPACE = { [9] = true, [10] = true, [11] = true, [12] = true, [13] = true, [32] = true }

local function trim(s)
  if s == "" or not (SPACE[s:byte(1)] or SPACE[s:byte(-1)]) then return s end -- the usual case
  return (s:gsub("^%s+", ""):gsub("%s+$", ""))
end
M.trim = trim

-- thrownShape: read an error object, a plain table or a string the same way.
-- Returns {name=?, message=?, code=?} with string fields or nil.
function M.shape(err)
  local t = type(err)
  if t == "string" then
    return { message = err }
  elseif t == "table" then
    local function str(v)
      if type(v) == "string" then return v end
      if type(v) == "number" then return tostring(v) end
      return nil
    end
    local message = str(err.message)
    if message == nil then message = str(err.error) end
    return { name = str(err.name), message = message, code = str(err.code) }
  elseif t == "nil" then
    return {}
  end
  return { message = tostring(err) }
end

local function check_list(spec, field, errs)
  local v = spec[field]
  if v == nil then return {} end
  if type(v) ~= "table" then
    errs[#errs + 1] = field .. " must be a list of strings"
    return {}
  end
  local out = {}
  for i = 1, #v do
    if type(v[i]) ~= "string" or v[i] == "" then
      errs[#errs + 1] = string.format("%s[%d] must be a non-empty string", field, i)
    else
      out[#out + 1] = v[i]
    end
  end
  return out
end

local function check_examples(spec, field, errs)
  local v = spec[field]
  if type(v) ~= "table" or #v == 0 then
    errs[#errs + 1] = field .. " must list at least one example"
    return {}
  end
  local out = {}
  for i = 1, #v do
    local ex = v[i]
    if type(ex) == "string" then
      out[#out + 1] = ex
    elseif type(ex) == "table" then
      local copy = {}
      for k, x in pairs(ex) do
        if k ~= "name" and k ~= "code" and k ~= "message" then
          errs[#errs + 1] = string.format("%s[%d]: unknown field %s (use name, code, message)",
            field, i, tostring(k))
        elseif type(x) ~= "string" then
          errs[#errs + 1] = string.format("%s[%d].%s must be a string", field, i, k)
        else
          copy[k] = x
        end
      end
      out[#out + 1] = copy
    else
      errs[#errs + 1] = string.format("%s[%d] must be a string or {name=, code=, message=}", field, i)
    end
  end
  return out
end

-- Build a rule. Returns the rule, or nil and a list of messages.
function M.new(spec)
  if type(spec) ~= "table" then return nil, { "rule{...} takes a table" } end
  local errs = {}
  for k in pairs(spec) do
    if not LIST_FIELDS[k] and not EXAMPLE_FIELDS[k] then
      errs[#errs + 1] = "unknown field " .. tostring(k)
        .. " (use names, codes, texts, patterns, matches, rejects)"
    end
  end
  local r = setmetatable({}, Rule)
  r.names = check_list(spec, "names", errs)
  r.codes = check_list(spec, "codes", errs)
  r.texts = check_list(spec, "texts", errs)
  r.patterns = check_list(spec, "patterns", errs)
  r.matches = check_examples(spec, "matches", errs)
  r.rejects = check_examples(spec, "rejects", errs)
  if #r.names + #r.codes + #r.texts + #r.patterns == 0 then
    errs[#errs + 1] = "a rule needs at least one of names, codes, texts, patterns"
  end
  for i, p in ipairs(r.patterns) do
    local ok, why = pcall(string.find, "", p)
    if not ok then
      errs[#errs + 1] = string.format("patterns[%d] is not a valid Lua pattern: %s", i,
        tostring(why):gsub("^.-:%d+: ", ""))
    end
  end
  r.lower_texts = {}
  for i, t in ipairs(r.texts) do r.lower_texts[i] = t:lower() end
  if #errs > 0 then return nil, errs end
  return r
end

-- Build the rule again from its current fields: a policy may refine a rule after building it
-- (table.insert(recycle.texts, "...")), and the refinement must be checked and compiled too.
function M.rebuild(r)
  return M.new({
    names = r.names, codes = r.codes, texts = r.texts, patterns = r.patterns,
    matches = r.matches, rejects = r.rejects,
  })
end

function M.is_rule(v)
  return type(v) == "table" and getmetatable(v) == Rule
end

-- Typed match: the error's name or code.
function Rule:match_name(shape)
  if shape.name then
    for _, n in ipairs(self.names) do
      if shape.name == n then return true end
    end
  end
  if shape.code then
    for _, c in ipairs(self.codes) do
      if shape.code == c then return true end
    end
  end
  return false
end

-- Text match: plain substrings (any case) and patterns.
function Rule:match_text(text)
  if type(text) ~= "string" then return false end
  if #text > M.MAX_MATCH_BYTES then text = text:sub(1, M.MAX_MATCH_BYTES) end
  if #self.lower_texts > 0 then
    local lower = text:lower()
    for _, t in ipairs(self.lower_texts) do
      if lower:find(t, 1, true) then return true end
    end
  end
  for _, p in ipairs(self.patterns) do
    if text:find(p) then return true end
  end
  return false
end

-- Either: the thrown value's name/code, else its message text.
function Rule:match(err)
  local shape = M.shape(err)
  return self:match_name(shape) or self:match_text(shape.message)
end

local function describe(ex)
  if type(ex) == "string" then return string.format("%q", ex) end
  local parts = {}
  for _, k in ipairs({ "name", "code", "message" }) do
    if ex[k] then parts[#parts + 1] = string.format("%s=%q", k, ex[k]) end
  end
  return "{" .. table.concat(parts, ", ") .. "}"
end

-- Run the rule's own examples. Returns a list of failure messages (empty when all pass),
-- and the number of examples checked.
function Rule:check_examples()
  local failures = {}
  for i, ex in ipairs(self.matches) do
    if not self:match(ex) then
      failures[#failures + 1] = string.format("matches[%d] %s is not matched by the rule", i, describe(ex))
    end
  end
  for i, ex in ipairs(self.rejects) do
    if self:match(ex) then
      failures[#failures + 1] = string.format("rejects[%d] %s is matched by the rule", i, describe(ex))
    end
  end
  return failures, #self.matches + #self.rejects
end

return M
