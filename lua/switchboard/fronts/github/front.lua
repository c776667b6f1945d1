-- The dispatcher's front interface for runs GitHub started (threads "github:OWNER/REPO#N",
-- fronts/github/issues.lua): a run's card is an issue comment, created when the run is queued
-- and edited as it goes — at most once per `issues.update_every_ms` (policies/agents.lua), only
-- the newest state sent — and its final state (the answer) is the comment's last edit, sent at
-- once. A plain answer (help, a refusal) is a comment of its own.
--
--   local f = front.new{credentials = identity, policy = policy.current, log?, now_ms?}
--   f:post(thread, msg) → handle;  f:update(handle, msg);  f:flush(signal)
--   front.place(thread) → repo, number | nil
local core = require("switchboard.core")
local in_flight = require("switchboard.dispatch.in_flight")
local issues_api = require("switchboard.github.issues")

local M = {}
local F = {}
F.__index = F

function M.place(thread)
  local repo, n = tostring(thread):match("^github:([^#]+)#(%d+)$")
  if not repo then return nil end
  return repo, math.tointeger(tonumber(n))
end

function M.new(opts)
  return setmetatable({ credentials = opts.credentials, policy = opts.policy, log = opts.log or core.log,
                        now_ms = opts.now_ms or core.now_ms, cards = in_flight.cards(opts.log or core.log, "github.front_error") }, F)
end

-- The API's options for the thread's repository, with a token minted now.
function F:api(repo, number)
  local snap = self.policy()
  local creds = self.credentials
  if not creds then return nil, core.error("credential", "no GitHub credential (docs/github.md)") end
  local agent = snap.agents.agents[snap.agents.issues.agent]
  local envs, err = creds:resolve_envs(agent and agent.token_scope or "write", { repo = repo })
  if not (envs and envs.GH_TOKEN) then
    return nil, core.is_error(err) and err or core.error("credential", "no GitHub token (docs/github.md)")
  end
  return { api_url = creds:api_url(), token = envs.GH_TOKEN, repo = repo, number = number,
           timeout_ms = snap.github.request_timeout_ms }
end

function F:spawn(fn) self.cards:go(fn) end
function F:flush(signal) return self.cards:flush(signal) end

local function failed(self, h, what, err)
  self.log("warn", "github.api_failed", { call = what, repo = h.repo, issue = h.number,
    error = tostring(err):match("^[^\n]*") })
end

local next_state = in_flight.next_state

function F:card_worker(h)
  local o, err = self:api(h.repo, h.number)
  if not o then return failed(self, h, "token", err) end
  local msg = h.pending
  h.pending = nil
  local got
  got, err = issues_api.create_comment(o, core.log_scrub(msg.text))
  if not got then
    h.dead = true
    return failed(self, h, "create comment", err)
  end
  h.comment = got
  if msg.final then return end
  local last = self.now_ms()
  while true do
    next_state(h)
    local wait = last + self.policy().agents.issues.update_every_ms - self.now_ms()
    if wait > 0 and not h.final_queued then core.sleep(wait, h.final_known) end
    msg = h.pending
    h.pending = nil
    o = self:api(h.repo, h.number) or o -- a token minted now: a long run outlives one
    local ok, uerr = issues_api.edit_comment(o, got.id, core.log_scrub(msg.text))
    last = self.now_ms()
    if not ok then failed(self, h, "edit comment", uerr) end
    if msg.final then return end
  end
end

function F:post(thread, msg)
  local repo, number = M.place(thread)
  local h = { thread = thread, repo = repo, number = number, pending = msg, final_known = core.signal(self.cards.hurrying) }
  if not repo then
    self.log("error", "github.post_unplaced", { thread = tostring(thread) })
    h.dead = true
    return h
  end
  h.final_queued = msg.final == true
  self:spawn(function() self:card_worker(h) end)
  return h
end

function F:update(h, msg)
  if h.final_queued or h.dead then return end
  in_flight.put(h, msg)
end

return M
