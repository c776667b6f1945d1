-- The resident executor (docs/resident.md, docs/contract.md#provisioning): a thread's commands
-- run in its own worktree of a repository's warm checkout on `switchboard resident`.
--
-- /exec, /read and /write are sandboxd's wire protocol, so they go through the sandbox
-- executor (exec/sandbox.lua: the budget, timeoutMs in the body only when the caller asked,
-- the wait of budget + call margin, the dual failure shape, fleet-busy, credentials per call);
-- this module adds what the resident has that sandboxd does not:
--   * /attach before the first command; one re-attach when the server answers not-attached
--     (the worktree was evicted, or the resident restarted); still not attached → infra with
--     code infra/attach;
--   * a runtime replaced under a command (the server's named answer, or a dropped connection
--     after which /healthz shows a new generation): the first is an ordinary result the model
--     reads (exit 127, "run it again") that leaves the fail-fast count alone; the policy's
--     errors.runtime_replaced_infra_after in a row is infra with code infra/runtime-replaced;
--   * release("always") sends /detach with force (the thread's processes are killed and its
--     worktree evicted); "if-clean" keeps the worktree for the thread's next ask.
local core = require("switchboard.core")
local client = require("switchboard.exec.resident_client")
local sandbox = require("switchboard.exec.sandbox")
local errors = require("switchboard.exec.errors")
local classify = require("switchboard.shell.classify")
local render = require("switchboard.shell.render")
local protocol = require("switchboard.shell.protocol")

local M = {}
M.__index = M

M.NOT_ATTACHED = "not-attached"
M.REPLACED = "runtime-replaced"

local function first_line(s) return (tostring(s or ""):match("^[^\n]*")) end

local decode = client.decode

-- opts: url, token, thread_key, repo (OWNER/NAME), ref?, policy, resolve_envs, request?
function M.new(opts)
  assert(type(opts.repo) == "string", "resident executor: opts.repo is required")
  local self = setmetatable({
    backend = "resident", token = opts.token,
    thread_key = opts.thread_key or "default", repo = opts.repo, ref = opts.ref, policy = opts.policy,
    request = opts.request or core.http.request, attached = false, replaced = 0,
  }, M)
  self.client = client.new{ url = opts.url, token = opts.token, thread_key = self.thread_key,
    request = opts.request }
  -- Every wire answer passes here, so the in-body reasons the sandbox executor does not know
  -- (not-attached, runtime-replaced) can be read after it has judged them.
  local function request(req)
    self.last = nil
    local status, headers, raw = self.request(req)
    self.last = { status = status, doc = status and decode(raw) or nil }
    return status, headers, raw
  end
  self.wire = sandbox.new{ url = opts.url, token = opts.token, thread_key = self.thread_key,
    policy = opts.policy, resolve_envs = opts.resolve_envs, request = request }
  return self
end

-- status, doc ({} when the answer is not a JSON object) | nil, transport error
local function call(self, method, path, body, deadline_ms, signal)
  local status, doc = self.client:call(method, path, body, deadline_ms, signal)
  if status == nil then return nil, doc end
  return status, doc or {}
end

-- POST /attach → true | nil, infra error
local function attach(self, snap, signal)
  local status, doc = call(self, "POST", "/attach", { repo = self.repo, ref = self.ref },
    snap.timeouts.resident.attach_timeout_ms + snap.timeouts.call.margin_ms, signal)
  if status == 200 then
    self.attached, self.generation = true, doc.generation
    return true
  end
  local why = status and ("HTTP %d: %s"):format(status, first_line(doc.error or "no error text"))
    or first_line(doc and doc.message or "transport failure")
  return nil, errors.infra(("the resident could not attach this thread to %s (%s)"):format(self.repo, why),
    classify.span_code(snap, "attach"))
end

local function last_reason(self)
  local d = self.last and self.last.doc
  return type(d) == "table" and (d.reason or d.code) or nil
end

-- After a transport failure: a resident that answers /healthz with another generation was
-- replaced under the command.
local function replaced_under(self, snap)
  if not self.generation or (self.last and self.last.status) then return false end
  local status, doc = call(self, "GET", "/healthz", nil, snap.timeouts.resident.probe_timeout_ms)
  return status == 200 and doc.generation ~= nil and doc.generation ~= self.generation
end

-- One wire call with attach before it and one re-attach; fn() → the sandbox executor's answer.
local function attached_call(self, snap, signal, fn)
  for attempt = 1, 2 do
    if not self.attached then
      local ok, err = attach(self, snap, signal)
      if not ok then return nil, err end
    end
    local a, b = fn()
    if a ~= nil or last_reason(self) ~= M.NOT_ATTACHED then return a, b end
    self.attached = false
    if attempt == 2 then
      return nil, errors.infra(("the resident lost this thread's worktree of %s again right after a re-attach")
        :format(self.repo), classify.span_code(snap, "attach"))
    end
  end
end

function M:exec(command, opts)
  opts = opts or {}
  local snap = opts.snap or self.policy()
  local wopts = {}
  for k, v in pairs(opts) do wopts[k] = v end
  wopts.snap = snap
  local r, err = attached_call(self, snap, opts.signal, function() return self.wire:exec(command, wopts) end)
  if r then
    self.replaced = 0
    return r
  end
  local named = errors.is_infra(err) and last_reason(self) == M.REPLACED
  if not (named or (errors.is_infra(err) and replaced_under(self, snap))) then return nil, err end
  self.attached = false -- a new runtime knows no threads; the next command attaches again
  self.replaced = self.replaced + 1
  local text = named and tostring(err)
    or "resident runtime replaced under the command: the resident restarted (a new generation answers); run it again"
  if classify.runtime_replaced_is_infra(snap, self.replaced) then
    return nil, errors.infra(("%s (runtime replaced %d times in a row)"):format(text, self.replaced),
      classify.span_code(snap, "runtime_replaced"))
  end
  local result = render.result(snap, { exit_code = protocol.FAILURE_EXIT, stdout = "", stderr = text })
  result.runtime_replaced = true -- the health tracker leaves its count alone for this one
  return result
end

function M:read_file(path, opts)
  opts = opts or {}
  local snap = opts.snap or self.policy()
  return attached_call(self, snap, opts.signal, function() return self.wire:read_file(path, opts) end)
end

function M:write_file(path, bytes, opts)
  opts = opts or {}
  local snap = opts.snap or self.policy()
  return attached_call(self, snap, opts.signal, function() return self.wire:write_file(path, bytes, opts) end)
end

-- "always" (a hard stop, a read-only run): /detach with force — the thread's processes are
-- killed and its worktree evicted. "if-clean": the worktree stays for the next ask.
function M:release(mode)
  if mode ~= "always" then return true end
  local snap = self.policy()
  local status, doc = call(self, "POST", "/detach", { force = true },
    snap.timeouts.resident.probe_timeout_ms + snap.timeouts.call.margin_ms)
  self.attached = false
  if status == 200 then return true end
  return nil, errors.infra("the resident did not detach this thread: "
    .. (status and ("HTTP " .. status) or first_line(doc and doc.message)))
end

-- The factory's probe: GET /status?repo= → status, doc | nil, transport error.
function M.probe(opts)
  local status, doc = client.new(opts):call("GET", "/status?repo=" .. opts.repo, nil, opts.timeout_ms)
  if status == nil then return nil, doc end
  return status, doc or {}
end

M.configured = client.configured

-- `repo onboard OWNER/REPO` from a front: asks the resident to onboard and says what happens
-- next (the text the thread gets).
function M.onboard_text(snap, getenv, repo, url_override)
  local url, token = client.configured(snap, getenv, url_override)
  if not url then
    return ("I cannot onboard %s: no resident is configured (%s is not set in the bot's environment)."):format(repo, token)
  end
  local status, doc = client.new{ url = url, token = token }:call("POST", "/onboard", { repo = repo },
    snap.timeouts.resident.probe_timeout_ms)
  if status == nil then
    return ("I cannot onboard %s: the resident cannot be reached (%s); try again in a minute."):format(repo,
      first_line(doc and doc.message))
  end
  doc = doc or {}
  if status ~= 202 then
    return ("The resident refused to onboard %s (HTTP %d: %s)."):format(repo, status, first_line(doc.error or "no reason given"))
  end
  if doc.state == "warm" then
    return ("%s is already onboarded and warm on the resident; its asks run there."):format(repo)
  end
  return ("Onboarding %s on the resident: it is cloned and its install command runs once; asks on it use "
    .. "the resident as soon as it is warm (until then they run in a fresh sandbox, and the card says why)."):format(repo)
end


---------------------------------------------------------------------------------------------
-- The backend's declaration (exec/backends.lua): the resident (docs/resident.md), chosen only
-- for a repository agent whose repository is warm there. The factory probes /status with
-- timeouts.resident.probe_timeout_ms; a transport failure is remembered for
-- timeouts.resident.negative_cache_ms (no probe, straight to the fallback); anything but warm
-- falls back to the per-thread backend (execution.resident.fallback, sandbox) with a note on
-- the card that says why (docs/contract.md#provisioning).
local schema = require("switchboard.policy.schema")
local S = schema.S

local unreachable_until = {} -- resident URL → now_ms until which it is not probed again

function M.forget_probes() unreachable_until = {} end

local function resident_note(status, doc, repo)
  if status == 404 then
    return ("resident: %s is not onboarded — onboard it once with `repo onboard %s` (or "
      .. "`switchboard resident onboard %s`)"):format(repo, repo, repo)
  end
  if status == 200 then
    return ("resident %s%s"):format(tostring(doc.state), doc.reason and (" (" .. tostring(doc.reason) .. ")") or "")
  end
  return ("resident answered /status with HTTP %d"):format(status)
end

-- Why the resident is not used for this thread (nil: it is, the executor second).
local function not_used(opts, ctx, snap, kit, url, token)
  if kit.network == "none" then
    -- the resident's worktrees get their walls at /attach, with its own policy's network
    return "resident does not give network \"none\", which agent " .. tostring(ctx.agent) .. " declares"
  elseif not ctx.repo then
    return "resident needs the thread's repository (none was resolved)"
  elseif (unreachable_until[url] or 0) > core.now_ms() then
    return "resident unreachable (a probe failed in the last " .. snap.timeouts.resident.negative_cache_ms // 1000 .. " s)"
  end
  local status, doc = M.probe{ url = url, token = token, repo = ctx.repo,
    timeout_ms = snap.timeouts.resident.probe_timeout_ms, request = opts.resident_request }
  if status == 200 and doc.state == "warm" then
    return nil, M.new{ url = url, token = token, thread_key = ctx.thread_key, repo = ctx.repo, ref = ctx.ref,
      policy = opts.policy, resolve_envs = kit.resolve_envs }
  elseif status == nil then
    unreachable_until[url] = core.now_ms() + snap.timeouts.resident.negative_cache_ms
    return "resident unreachable (" .. tostring(doc and doc.message or "transport failure"):match("^[^\n]*") .. ")"
  end
  return resident_note(status, doc, ctx.repo)
end

local function build(opts, ctx, snap, _, kit)
  local url, token = M.configured(snap, opts.getenv or os.getenv, opts.resident_url)
  if not url then return kit.missing(token) end
  local why, ex = not_used(opts, ctx, snap, kit, url, token)
  if ex then return ex end
  local fallback = snap.execution.resident.fallback or "sandbox"
  local fresh = fallback == "local" and "local workspace" or "sandbox"
  local fex, err = kit.fallback(fallback)
  if not fex then
    -- why the resident was not used comes first: alone, the fallback's "SANDBOX_URL is not
    -- set" read as if the resident had never been asked
    if errors.is_error(err) and err.kind == "tool" then
      return nil, errors.tool(("%s, so this falls back to a fresh %s: %s"):format(why, fresh, err.message))
    end
    return nil, err
  end
  return fex, fallback, ("%s — using fresh %s"):format(why, fresh)
end

-- Its part of policies/execution.lua: `resident = {…}`.
local SETTINGS = S.record {
  url_env = schema.env_name, token_env = schema.env_name,
  base_url = S.optional(S.string { one_line = true, pattern = "^https?://" , what = "an http(s) URL" }),
  fallback = S.optional(S.enum({ "sandbox", "local" })),
  install = S.list(S.record {
    file = S.string { one_line = true }, command = S.string { one_line = true },
    deps = S.list(S.string { one_line = true }),
  }),
}

M.backend = {
  name = "resident",
  help = "a warm checkout on the resident, else a fresh sandbox",
  settings = SETTINGS,
  configured = function(snap, getenv, opts) return M.configured(snap, getenv, opts.resident_url) ~= nil end,
  -- commands on this host when it falls back to the local executor
  on_this_host = function(snap) return snap.execution.resident.fallback == "local" end,
  build = build,
}

return M
