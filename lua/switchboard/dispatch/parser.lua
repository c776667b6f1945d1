-- The grammar of an ask, as a person types it in a thread (Slack or the console):
--
--   [@switchboard] run `COMMAND`                          the default agent (policy)
--   [@switchboard] agent:NAME run `COMMAND`               a named agent
--   [@switchboard] agent:NAME run `COMMAND` in OWNER/REPO … on a repository
--   stop                                                  stop this thread's running command
--   repo onboard OWNER/REPO                               onboard a repository on the resident
--   help                                                  what is possible
--
-- A command sits between single backticks (the last backtick closes it, so a command may hold
-- backticks of its own) or in a ``` block (Slack's code block, which may span lines). The
-- repository may also be written as a GitHub URL (Slack wraps links in <…>).
--
-- parse(text) → one of
--   {kind = "run", agent = NAME | nil, command = COMMAND, repo = "OWNER/REPO" | nil}
--   {kind = "stop"} | {kind = "help"} | {kind = "onboard", repo = "OWNER/REPO"}
--   {kind = "malformed", reason = TEXT}   reason says what was wrong and how to write it
--   {kind = "free_text", agent = NAME | nil, model = NAME | nil, effort = low|medium|high | nil,
--    text = TEXT}   an ask with no `run`; model: and effort: stick to the thread (dispatcher)
-- Nothing here knows which agents exist: the dispatcher checks the name against policy.
local core = require("switchboard.core")
local M = {}

local function trim(s)
  return (s:gsub("^%s+", ""):gsub("%s+$", ""))
end

-- A leading mention: Slack's <@U123ABC> or a typed @switchboard, with an optional , or :.
local function strip_mention(s)
  s = s:gsub("^<@[%w._-]+>[,:]?%s*", "", 1)
  s = s:gsub("^@[%w._-]+[,:]?%s+", "", 1)
  return s
end

M.REPO_HINT = "name it as OWNER/REPO, for example `in acme/api`"

-- GitHub's rules: an owner is 1-39 letters, digits and single hyphens (not at either end);
-- a repository name is 1-100 letters, digits, '.', '_' and '-', and is not "." or "..".
function M.valid_repo(repo)
  if type(repo) ~= "string" then return false end
  local owner, name = repo:match("^([^/]+)/([^/]+)$")
  if not owner then return false end
  if #owner > 39 or not owner:match("^%w[%w-]*$") or owner:sub(-1) == "-"
    or owner:find("--", 1, true) then
    return false
  end
  if #name > 100 or not name:match("^[%w._-]+$") or name == "." or name == ".." then
    return false
  end
  return true
end

-- "acme/api", "<https://github.com/acme/api>", "https://github.com/acme/api.git/",
-- "acme/api." (a sentence's full stop: a name ending in "." is not worth the ambiguity)
-- → "acme/api" | nil
local function repo_of(word)
  local w = word:gsub("^<", ""):gsub(">$", ""):gsub("|.*$", "")
  w = w:gsub("^https?://github%.com/", ""):gsub("^github%.com/", "")
  w = w:gsub("/+$", ""):gsub("%.git$", "")
  w = w:gsub("[,;!?]+$", ""):gsub("%.$", "") -- punctuation ending the sentence
  if M.valid_repo(w) then return w end
  return nil
end

-- The command after `run`, and what follows it. rest starts at the opening backtick(s).
local function command_of(rest)
  if rest:sub(1, 3) == "```" then
    local body = rest:sub(4)
    local close
    local from = 1
    while true do -- the LAST ``` closes the block
      local at = body:find("```", from, true)
      if not at then break end
      close, from = at, at + 1
    end
    if not close then return nil, core.error("malformed", "the ``` block is not closed") end
    local command = body:sub(1, close - 1)
    -- ```sh\n… : a language tag on the opening line is not part of the command
    local tag, after = command:match("^(%a[%w_+-]*)\n(.*)$")
    if tag and (tag == "sh" or tag == "bash" or tag == "shell" or tag == "console") then
      command = after
    end
    return trim(command), trim(body:sub(close + 3))
  end
  local body = rest:sub(2)
  local close
  local from = 1
  while true do -- the LAST backtick closes the command
    local at = body:find("`", from, true)
    if not at then break end
    close, from = at, at + 1
  end
  if not close then return nil, core.error("malformed", "the command's closing backtick is missing") end
  return trim(body:sub(1, close - 1)), trim(body:sub(close + 1))
end

-- effort:LEVEL words and an example of each choice word
M.EFFORTS = { low = true, medium = true, high = true }
M.EXAMPLES = { agent = "agent:coding", model = "model:claude-opus-4-5", effort = "effort:high" }

local function malformed(reason)
  return { kind = "malformed", reason = reason }
end

local function parse_run(agent, rest)
  -- rest: what follows the word `run`
  rest = trim(rest)
  if rest == "" then
    return malformed("`run` needs a command in backticks, for example run `ls -la`")
  end
  if rest:sub(1, 1) ~= "`" then
    local first = rest:match("^[^\n]*")
    return malformed(("put the command in backticks: run `%s`"):format(first))
  end
  local command, trailing = command_of(rest)
  if command == nil then
    return malformed(tostring(trailing) .. "; write the command as run `COMMAND`")
  end
  if command == "" then
    return malformed("the command between the backticks is empty; write run `COMMAND`")
  end
  local repo
  if trailing ~= "" then
    local kw, target = trailing:match("^(%a+)%s*(.-)$")
    if kw == nil or kw:lower() ~= "in" then
      return malformed(("unexpected %q after the command; the only thing that may follow "
        .. "it is `in OWNER/REPO`"):format(trailing))
    end
    if target == "" then
      return malformed("`in` needs a repository: " .. M.REPO_HINT)
    end
    if target:find("%s") then
      return malformed(("one repository per ask, and nothing after it: %q"):format(target))
    end
    repo = repo_of(target)
    if repo == nil then
      return malformed(("%q is not a repository name; %s"):format(target, M.REPO_HINT))
    end
  end
  return { kind = "run", agent = agent, command = command, repo = repo }
end

function M.parse(text)
  if type(text) ~= "string" then return { kind = "help" } end
  local s = trim(strip_mention(trim(text)))
  local lower = s:lower()
  if s == "" or lower == "help" or lower == "?" or lower == "/help" or lower == "help?" then
    return { kind = "help" }
  end
  if lower:match("^stop[.!]*$") then return { kind = "stop" } end
  local onboard_target = s:match("^[Rr][Ee][Pp][Oo]%s+[Oo][Nn][Bb][Oo][Aa][Rr][Dd]%s*(.-)%s*$")
  if onboard_target then
    local repo = repo_of(onboard_target)
    if repo == nil then return malformed("say which repository to onboard: repo onboard OWNER/REPO; " .. M.REPO_HINT) end
    return { kind = "onboard", repo = repo }
  end

  -- agent:NAME, model:NAME and effort:LEVEL, in any order, before the ask
  local agent, chosen = nil, {}
  while true do
    local key, name, after = s:match("^(%a+):(%S*)(.*)$")
    key = key and key:lower()
    if not (key == "agent" or key == "model" or key == "effort") then break end
    if name == "" then
      return malformed(("`%s:` needs a name right after the colon, for example %s"):format(key, M.EXAMPLES[key]))
    end
    if key == "agent" then
      if not name:match("^[%w_-]+$") then
        return malformed(("%q is not an agent name (letters, digits, _ and -)"):format(name))
      end
      agent = name:lower()
    elseif key == "model" then
      if not name:match("^[%w._:@-]+$") then
        return malformed(("%q is not a model name (letters, digits and . _ : @ -)"):format(name))
      end
      chosen.model = name
    else
      local level = name:lower()
      if not M.EFFORTS[level] then
        return malformed(("effort:%s is not a level: say effort:low, effort:medium or effort:high"):format(name))
      end
      chosen.effort = level
    end
    s = trim(after)
    lower = s:lower()
    if s == "" and key == "agent" then
      return malformed(("say what agent:%s should run: agent:%s run `COMMAND`"):format(agent, agent))
    elseif s == "" then
      return malformed(("say what to do after %s:%s, for example %s:%s fix the failing test"):format(key, name, key, name))
    end
  end

  local word, rest = s:match("^(%a+)(.*)$")
  if word and word:lower() == "run" and (rest == "" or rest:match("^[%s`]")) then
    return parse_run(agent, rest)
  end
  if s:sub(1, 1) == "`" then
    return malformed(("start the ask with `run`: run %s"):format(s:match("^[^\n]*")))
  end
  return { kind = "free_text", agent = agent, model = chosen.model, effort = chosen.effort, text = s }
end

return M
