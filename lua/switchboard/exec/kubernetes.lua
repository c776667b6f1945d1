-- The kubernetes executor: a thread's commands run in a pod of its own, claimed from the
-- operator's agent-sandbox warm pool (docs/deploy.md "Kubernetes with agent-sandbox";
-- docs/contract.md#failure-infra, #capacity).
--
--   * The thread's first operation creates a SandboxClaim (extensions.agents.x-k8s.io/v1beta1)
--     named from the thread key (switchboard-<hash>) and labelled with it, against the warm
--     pool policies/execution.lua names, and waits through a watch (kubernetes_api.lua: resumed
--     after a cut, relisted on 410) until agent-sandbox's controller reports it Ready with the
--     pod's IP in status.sandbox.podIPs. Then every /exec, /read and /write goes to the
--     sandboxd inside that pod (`sandboxd --pod`: the pod is the wall) through the sandbox
--     executor, unchanged. Follow-ups reuse the claim; a later process finds it by its name (a
--     create answered 409 AlreadyExists adopts the thread's own claim).
--   * Idle sleep is the claim's spec.lifecycle.shutdownTime with shutdownPolicy Delete (Retain
--     with a kept workspace, below): before
--     an operation that could outlive it, the time is moved to now + the operation's bound +
--     2 × timeouts sandbox.sleep_after (one merge-patch; most follow-ups need none), and
--     agent-sandbox deletes the claim, and with it the pod, when it passes. Why not a delete
--     from here after the idle time: the cluster then enforces the sleep even when the bot
--     crashed or was redeployed, and no timer keeps a one-shot `switchboard exec` alive. So a
--     pod sleeps between sleep_after and the last operation's bound + 2 × sleep_after after
--     that operation ended. release("always") (a hard stop) ends the pod at once.
--   * The workspace outlives the pod (issue 37), when policies/execution.lua kubernetes
--     .workspace_size is set: the claim carries a volumeClaimTemplate named "workspace" (which
--     replaces the SandboxTemplate's emptyDir of that name: agent-sandbox merges volumes by
--     name; a claim with one is always cold-started, never served from the warm pool) and
--     shutdownPolicy Retain. agent-sandbox names the PVC workspace-<sandbox> — the sandbox of a
--     cold claim is named after the claim, so workspace-switchboard-<hash> for every pod of the
--     thread — and makes the Sandbox its controller, so it would go with the Sandbox. The
--     backend therefore adds the claim as a second owner of that PVC (an ownerReference, not a
--     controller: the garbage collector keeps an object while any owner lives). At the idle
--     time agent-sandbox deletes the Sandbox and its pod but keeps the claim (Retain) and so
--     the PVC; the thread's next operation moves the claim's shutdownTime forward again, and
--     agent-sandbox makes a new Sandbox of the same name, which adopts the PVC (it carries
--     agent-sandbox's tracking label, agents.x-k8s.io/sandbox-name-hash): the same files. A
--     hard stop sleeps the pod the same way (shutdownTime now), and a pod that died is slept
--     and claimed anew, its files kept. The claim, and with it the PVC, is deleted when the
--     thread's record would expire (record.retention_ms after its shutdownTime: swept when
--     the bot next claims a pod, at most once per record.expire_every_ms). Without
--     workspace_size, or when the SandboxTemplate refuses claims' volumes
--     (VolumeClaimTemplatesError: its volumeClaimTemplatesPolicy is not Allowed), the claim
--     is made as before and the card says the workspace is not kept.
--   * A pod that disappears (the claim deleted, not Ready any more, or its IP changed, seen
--     after a failed operation) is an infra failure naming the claim; the claim is deleted and
--     forgotten, and the next operation claims a fresh pod — an empty workspace, where an agent
--     run clones the repository again on the thread's branch (agent/repo.lua).
--   * Capacity: no pod of the pool Ready within the fleet-busy wait (timeouts fleet_busy,
--     bounded by the command's budget), or a quota refusing the claim (403 "exceeded quota"),
--     is ExecCapacityError — the claim that could not be served is deleted. A claim the
--     controller refuses (WarmPoolNotFound, TemplateNotFound, …) is infra naming the reason.
local core = require("switchboard.core")
local budget = require("switchboard.shell.budget")
local errors = require("switchboard.exec.errors")
local process_notes = require("switchboard.exec.process_notes")
local kapi = require("switchboard.exec.kubernetes_api")
local kwatch = require("switchboard.exec.kubernetes_watch")
local sandbox = require("switchboard.exec.sandbox")
local preflight = require("switchboard.exec.preflight")
local render = require("switchboard.shell.render")

local M = {}
M.__index = M

M.API_VERSION = "extensions.agents.x-k8s.io/v1beta1"
M.GROUP_PATH = "/apis/extensions.agents.x-k8s.io/v1beta1"
M.THREAD_LABEL = "openswitchboard.dev/thread"
M.MANAGED_BY = "app.kubernetes.io/managed-by"
-- The SandboxTemplate's volume a kept workspace replaces (deploy/kubernetes/sandbox-template.yaml).
M.VOLUME = "workspace"
-- agent-sandbox's label on the PVCs it makes, the FNV-1a hash of the sandbox's name
-- (controllers/sandbox_controller.go NameHash, v0.5.6): a PVC without a controller that carries
-- it is adopted by the Sandbox of that name.
M.NAME_HASH_LABEL = "agents.x-k8s.io/sandbox-name-hash"
-- The Ready=False reasons of agent-sandbox's claim controller that no waiting cures: the
-- operator's setup is wrong (extensions/controllers/sandboxclaim_controller.go, v0.5.6).
M.REFUSALS = {
  WarmPoolNotFound = true, TemplateNotFound = true, InvalidMetadata = true,
  EnvVarsInjectionRejected = true, VolumeClaimTemplatesError = true, ClaimExpired = true,
}

-- The claim's name and label value for a thread: a hash of its key (a key may hold anything;
-- a name is a DNS label and a label value at most 63 characters).
function M.claim_name(thread_key)
  return "switchboard-" .. M.thread_label(thread_key)
end
function M.thread_label(thread_key)
  return core.crypto.hex(core.crypto.sha256(thread_key)):sub(1, 20)
end

-- agent-sandbox's NameHash: FNV-1a (32 bits) as 8 hex digits.
function M.name_hash(s)
  local h = 0x811c9dc5
  for i = 1, #s do h = ((h ~ s:byte(i)) * 0x01000193) & 0xffffffff end
  return ("%08x"):format(h)
end

-- The PVC agent-sandbox makes for the thread's kept workspace: <volume>-<sandbox name>, the
-- sandbox of a cold claim being named after the claim.
function M.volume_name(thread_key)
  return M.VOLUME .. "-" .. M.claim_name(thread_key)
end

-- opts: api (a kubernetes_api client), namespace, warm_pool, port (sandboxd's in the pod),
--       token (sandboxd's bearer), thread_key, agent, policy, resolve_envs, network, build,
--       wall_ms (core.wall_ms; specs may drive it), workspace ({size, storage_class}: the
--       thread's workspace is kept on a volume of that size; nil: not kept)
function M.new(opts)
  assert(type(opts.api) == "table", "kubernetes executor: opts.api is required")
  assert(type(opts.token) == "string" and opts.token ~= "", "kubernetes executor: opts.token is required")
  assert(type(opts.policy) == "function", "kubernetes executor: opts.policy is required")
  local key = opts.thread_key or "default"
  return setmetatable({
    backend = "kubernetes",
    api = opts.api, namespace = opts.namespace or "default", pool = opts.warm_pool or "switchboard",
    port = opts.port or 8080, token = opts.token, thread_key = key, agent = opts.agent,
    policy = opts.policy, resolve_envs = opts.resolve_envs, network = opts.network, build = opts.build,
    wall_ms = opts.wall_ms or core.wall_ms,
    name = M.claim_name(key), label = M.thread_label(key),
    keep = opts.workspace, -- nil when the workspace is not kept (or the template refused it)
    notes = {},
    claim = nil, -- {ip, sandbox, until_ms (wall clock)} while the thread holds a pod
    inner = nil, -- the sandbox executor on that pod's sandboxd
  }, M)
end

local function collection(self) return M.GROUP_PATH .. "/namespaces/" .. self.namespace .. "/sandboxclaims" end
local function item(self) return collection(self) .. "/" .. self.name end
local function rfc3339(ms) return os.date("!%Y-%m-%dT%H:%M:%SZ", math.floor(ms / 1000)) end
local function seconds(ms) return math.floor(ms / 1000 + 0.5) end

local function where(self)
  return ("SandboxClaim %s in namespace %s"):format(self.name, self.namespace)
end

local function api_text(f)
  if f.status then return ("HTTP %d %s: %s"):format(f.status, f.reason or "", f.message or "") end
  return ("%s: %s"):format(f.kind or "transport", f.message or "no answer")
end

local function api_infra(self, what, f)
  local code = f.kind == "timeout" and "timeout" or (f.status and ("http " .. f.status)) or "infra"
  if f.status == 401 or f.status == 403 then
    return errors.infra(("the Kubernetes API refused to %s %s (%s) — check the bot's service "
      .. "account and its Role on sandboxclaims (deploy/kubernetes/bot-rbac.yaml)"):format(what, where(self), api_text(f)), code)
  end
  return errors.infra(("the Kubernetes API could not %s %s (%s)"):format(what, where(self), api_text(f)), code)
end

local function shutdown_policy(self) return self.keep and "Retain" or "Delete" end
local function labels(self) return { [M.THREAD_LABEL] = self.label, [M.MANAGED_BY] = "switchboard" } end

local function volume_spec(self)
  return {
    accessModes = { "ReadWriteOnce" },
    resources = { requests = { storage = self.keep.size } },
    storageClassName = self.keep.storage_class,
  }
end

-- In whole seconds, as the claim's shutdownTime carries it: the time the cluster acts on.
local function lifecycle_until(self, snap, need_ms)
  return (self.wall_ms() + need_ms + 2 * snap.timeouts.sandbox.sleep_after_ms) // 1000 * 1000
end

local function claim_body(self, until_ms)
  return {
    apiVersion = M.API_VERSION, kind = "SandboxClaim",
    metadata = {
      name = self.name,
      labels = labels(self),
      annotations = self.agent and { ["openswitchboard.dev/agent"] = tostring(self.agent) } or nil,
    },
    spec = {
      warmPoolRef = { name = self.pool },
      lifecycle = { shutdownTime = rfc3339(until_ms), shutdownPolicy = shutdown_policy(self) },
      volumeClaimTemplates = self.keep and {
        { metadata = { name = M.VOLUME, labels = labels(self) }, spec = volume_spec(self) },
      } or nil,
    },
  }
end
M.claim_body = claim_body -- specs validate it against the CRD's schema

local function pvc_collection(self) return "/api/v1/namespaces/" .. self.namespace .. "/persistentvolumeclaims" end

-- The PVC of the kept workspace as the backend makes it when agent-sandbox has not yet: the
-- claim its owner, agent-sandbox's tracking label so the Sandbox adopts it.
local function volume_body(self, owner)
  local md_labels = labels(self)
  md_labels[M.NAME_HASH_LABEL] = M.name_hash(self.name)
  return {
    apiVersion = "v1", kind = "PersistentVolumeClaim",
    metadata = { name = M.volume_name(self.thread_key), labels = md_labels, ownerReferences = { owner } },
    spec = volume_spec(self),
  }
end
M.volume_body = volume_body

local function watch_spec(self, rv, bound_ms, signal)
  return {
    path = collection(self), get_path = item(self), rv = rv, bound_ms = bound_ms, signal = signal,
    query = "fieldSelector=metadata.name%3D" .. self.name,
  }
end

-- Forget the thread's pod and delete its claim (best effort: a claim left behind ends at its
-- shutdownTime).
local function forget(self, signal)
  self.claim, self.inner = nil, nil
  local st, f = self.api:call("DELETE", item(self), nil, { signal = signal })
  if st == nil and f.status ~= 404 and f.kind ~= "aborted" then
    core.log("warn", "kubernetes.release_failed", { claim = self.name, error = api_text(f) })
  end
end

-- Put the thread's pod to sleep and keep its workspace: the claim's shutdownTime is now, and
-- agent-sandbox deletes the Sandbox and its pod but keeps the claim (Retain) and its volume.
-- Without a kept workspace this is forget's delete.
local function sleep_now(self, signal)
  if not self.keep then return forget(self, signal) end
  self.claim, self.inner = nil, nil
  local st, f = self.api:call("PATCH", item(self),
    { spec = { lifecycle = { shutdownTime = rfc3339(self.wall_ms()), shutdownPolicy = "Retain" } } },
    { signal = signal, content_type = "application/merge-patch+json" })
  if st == nil and f.status ~= 404 and f.kind ~= "aborted" then
    core.log("warn", "kubernetes.release_failed", { claim = self.name, error = api_text(f) })
  end
end

local function is_quota(f)
  return f.status == 403 and tostring(f.message):lower():find("exceeded quota", 1, true) ~= nil
end

-- A hard stop (the signal aborted) while the pod was being claimed, watched or waited for:
-- exec turns it into the stopped result, a file operation into a tool error.
local function stopped() return core.error("aborted", "stopped while the thread's pod was being claimed") end

-- Wait until a claim being deleted is gone. → true | nil, err
local function wait_deleted(self, snap, rv, signal)
  local v, f = self.api:watch_until(watch_spec(self, rv, snap.timeouts.kubernetes.api_timeout_ms, signal),
    function(kind) return kind == "DELETED" and "gone" or nil end)
  if v == "gone" then return true end
  if f and f.kind == "aborted" then return nil, stopped() end
  return nil, errors.infra(("the thread's previous %s is still being deleted after %ds; try again "
    .. "in a minute"):format(where(self), seconds(snap.timeouts.kubernetes.api_timeout_ms)), "timeout")
end

-- Create the thread's claim, or adopt the one a previous process made. → claim doc | nil, err
local function create(self, snap, until_ms, wait_for, signal)
  local waits, waited, i = nil, 0, 1
  while true do
    local st, doc = self.api:call("POST", collection(self), claim_body(self, until_ms), { signal = signal })
    if st then return doc end
    local f = doc
    if f.kind == "aborted" then return nil, stopped() end
    if f.status == 409 and f.reason == "AlreadyExists" then
      local gst, cur = self.api:call("GET", item(self), nil, { signal = signal })
      if gst then
        local cs = kwatch.claim_state(cur)
        if cs.labels[M.THREAD_LABEL] ~= self.label then
          return nil, errors.infra(("%s exists and is not this thread's (its %s label differs) — "
            .. "remove it, or give this bot a namespace of its own"):format(where(self), M.THREAD_LABEL))
        end
        if not cs.deleting then return cur, true end
        local ok, err = wait_deleted(self, snap, cs.rv, signal)
        if not ok then return nil, err end
      elseif cur.status ~= 404 then
        return nil, api_infra(self, "read", cur)
      end
    elseif is_quota(f) then
      waits = waits or budget.fleet_busy_waits(snap, wait_for)
      local d = waits[i]
      if d == nil then
        return nil, errors.capacity(("no pod for this thread: the namespace's quota refuses another "
          .. "SandboxClaim after waiting %ds (%s); try again when other threads' pods are released")
          :format(seconds(waited), f.message), waited)
      end
      if not core.sleep(d, signal) then return nil, stopped() end
      waited, i = waited + d, i + 1
    else
      return nil, api_infra(self, "create", f)
    end
  end
end

-- Wait through a watch until the claim is Ready with a pod IP. → state | nil, err
local function await_ready(self, snap, doc, wait_for, signal)
  local cs = kwatch.claim_state(doc)
  if cs.ready and cs.ip then return cs end
  local _, bound = budget.fleet_busy_waits(snap, wait_for)
  local last = cs
  local v, got = self.api:watch_until(watch_spec(self, cs.rv, bound, signal), function(kind, obj)
    if kind == "DELETED" then return "gone" end
    local s = kwatch.claim_state(obj)
    last = s
    if s.deleting then return "gone" end
    if s.ready and s.ip then return "ready" end
    if s.reason and M.REFUSALS[s.reason] then return "refused" end
  end)
  if v == "ready" then return kwatch.claim_state(got) end
  local said = last.reason and (" (the claim says %s: %s)"):format(last.reason, last.message or "") or ""
  if v == "gone" then
    self.claim, self.inner = nil, nil
    return nil, errors.infra(("%s was deleted before its pod was ready%s"):format(where(self), said))
  end
  if v == "refused" and last.reason == "VolumeClaimTemplatesError" and self.keep then
    -- the SandboxTemplate does not let claims bring volumes: claim again without one
    forget(self, signal)
    self.keep = nil
    self.notes[#self.notes + 1] = ("workspace not kept: the SandboxTemplate of warm pool %s refuses "
      .. "claims' volumes (%s) — set its volumeClaimTemplatesPolicy to Allowed "
      .. "(deploy/kubernetes/sandbox-template.yaml); this thread's files go when its pod sleeps")
      :format(self.pool, last.message or last.reason)
    return nil, core.error("retry", "claim again without a volume")
  end
  if v == "refused" then
    forget(self, signal)
    return nil, errors.infra(("agent-sandbox cannot serve %s%s — check the SandboxWarmPool %q and its "
      .. "SandboxTemplate (deploy/kubernetes/)"):format(where(self), said, self.pool))
  end
  if got.kind == "aborted" then return nil, stopped() end
  if got.kind == "timeout" then
    sleep_now(self, signal)
    return nil, errors.capacity(("no pod of warm pool %s became ready for this thread within %ds%s — "
      .. "the pool is empty or the cluster has no room; try again in a few minutes")
      :format(self.pool, seconds(bound), said), bound)
  end
  return nil, api_infra(self, "watch", got)
end

local function pod_url(self, ip)
  if ip:find(":", 1, true) then ip = "[" .. ip .. "]" end
  return ("http://%s:%d"):format(ip, self.port)
end

-- Keep the claim past this operation plus the idle time (a merge-patch when needed).
local function extend(self, snap, need_ms, signal)
  local want = self.wall_ms() + need_ms + snap.timeouts.sandbox.sleep_after_ms
  if self.claim.until_ms >= want then return true end
  local until_ms = lifecycle_until(self, snap, need_ms)
  local st, f = self.api:call("PATCH", item(self),
    { spec = { lifecycle = { shutdownTime = rfc3339(until_ms), shutdownPolicy = shutdown_policy(self) } } },
    { signal = signal, content_type = "application/merge-patch+json" })
  if st then self.claim.until_ms = until_ms; return true end
  if f.kind == "aborted" then return nil, stopped() end
  if f.status == 404 then
    self.claim, self.inner = nil, nil
    return nil, errors.infra(("the thread's pod is gone: %s no longer exists (released after idle, "
      .. "or deleted) — its workspace is lost; the next command claims a fresh pod: re-clone "
      .. "before continuing"):format(where(self)))
  end
  return nil, api_infra(self, "extend", f)
end

-- Records the claim as an owner of the thread's workspace volume, so that the volume outlives
-- each Sandbox (whose controller reference agent-sandbox puts on it). The PVC exists once the
-- pod is Ready; made here first only if it does not (agent-sandbox adopts it by its label).
-- A concurrent change (409 Conflict on the resourceVersion precondition) is read again.
local function keep_volume(self, uid, signal)
  local path = pvc_collection(self) .. "/" .. M.volume_name(self.thread_key)
  local owner = { apiVersion = M.API_VERSION, kind = "SandboxClaim", name = self.name, uid = uid }
  for _ = 1, 3 do
    local st, pvc = self.api:call("GET", path, nil, { signal = signal })
    if st == nil and pvc.status == 404 then
      st, pvc = self.api:call("POST", pvc_collection(self), volume_body(self, owner), { signal = signal })
      if st then return true end
      if not (pvc.status == 409 and pvc.reason == "AlreadyExists") then return nil, pvc end
    elseif st == nil then
      return nil, pvc
    else
      local md = type(pvc.metadata) == "table" and pvc.metadata or {}
      local refs = {}
      for _, r in ipairs(type(md.ownerReferences) == "table" and md.ownerReferences or {}) do
        if type(r) == "table" and r.uid == uid then return true end
        refs[#refs + 1] = r
      end
      refs[#refs + 1] = owner
      local pst, f = self.api:call("PATCH", path, { metadata = { ownerReferences = refs, resourceVersion = md.resourceVersion } },
        { signal = signal, content_type = "application/merge-patch+json" })
      if pst then return true end
      if f.status ~= 409 then return nil, f end
    end
  end
  return nil, { reason = "Conflict", message = "the volume kept changing under the update" }
end

-- The kept workspaces of threads whose record has expired: a claim of this bot's (its
-- managed-by label) with shutdownPolicy Retain whose shutdownTime is record.retention_ms past is
-- deleted, and the garbage collector takes its volume. Best effort, at most once per
-- record.expire_every_ms per namespace in this process, before a claim is made.
local last_sweep = {} -- namespace → wall ms
local function sweep(self, snap, signal)
  local now = self.wall_ms()
  if last_sweep[self.namespace] and now - last_sweep[self.namespace] < snap.record.expire_every_ms then return end
  last_sweep[self.namespace] = now
  local st, list = self.api:call("GET", collection(self) .. "?labelSelector=" .. M.MANAGED_BY .. "%3Dswitchboard",
    nil, { signal = signal })
  if st == nil then
    core.log("warn", "kubernetes.sweep_failed", { namespace = self.namespace, error = api_text(list) })
    return
  end
  local cutoff = rfc3339(now - snap.record.retention_ms)
  for _, c in ipairs(type(list.items) == "table" and list.items or {}) do
    local spec = type(c) == "table" and type(c.spec) == "table" and c.spec or {}
    local lc = type(spec.lifecycle) == "table" and spec.lifecycle or {}
    local name = type(c.metadata) == "table" and c.metadata.name
    -- RFC 3339 times in UTC with seconds compare as strings
    if type(name) == "string" and lc.shutdownPolicy == "Retain" and type(lc.shutdownTime) == "string"
        and #lc.shutdownTime == #cutoff and lc.shutdownTime < cutoff then
      local dst, f = self.api:call("DELETE", collection(self) .. "/" .. name, nil, { signal = signal })
      if dst then
        core.log("info", "kubernetes.workspace_expired", { claim = name })
      elseif f.status ~= 404 then
        core.log("warn", "kubernetes.sweep_failed", { claim = name, error = api_text(f) })
      end
    end
  end
end

-- The thread's pod's sandbox executor, claimed when the thread has none.
-- need_ms: how long the operation may take; wait_for: the budget the capacity wait is bounded by.
local function ensure(self, snap, need_ms, wait_for, signal)
  if self.inner and self.keep and self.wall_ms() >= self.claim.until_ms then
    -- past its shutdownTime: agent-sandbox has put the pod to sleep (the claim stays: Retain);
    -- the claim below is moved forward and a new pod mounts the same volume
    self.claim, self.inner = nil, nil
  end
  if self.inner then
    local ok, err = extend(self, snap, need_ms, signal)
    if not ok then return nil, err end
    return self.inner
  end
  if self.keep then sweep(self, snap, signal) end
  local until_ms = lifecycle_until(self, snap, need_ms)
  local doc, adopted = create(self, snap, until_ms, wait_for, signal)
  if not doc then return nil, adopted end
  if adopted then
    -- an adopted claim keeps the shutdownTime its maker set, maybe passed (a slept pod whose
    -- claim was retained): move it for this operation before waiting for its pod
    local st, patched = self.api:call("PATCH", item(self),
      { spec = { lifecycle = { shutdownTime = rfc3339(until_ms), shutdownPolicy = shutdown_policy(self) } } },
      { signal = signal, content_type = "application/merge-patch+json" })
    if st == nil then
      if patched.kind == "aborted" then return nil, stopped() end
      return nil, api_infra(self, "extend", patched)
    end
    doc = patched
  end
  local cs, err = await_ready(self, snap, doc, wait_for, signal)
  if not cs and err.kind == "retry" then return ensure(self, snap, need_ms, wait_for, signal) end
  if not cs then return nil, err end
  if self.keep then
    local ok, verr = keep_volume(self, cs.uid, signal)
    if not ok then
      if verr.kind == "aborted" then return nil, stopped() end
      -- the pod is usable; its volume goes with this Sandbox unless a later claim records it
      core.log("warn", "kubernetes.keep_failed", { claim = self.name, error = api_text(verr) })
      self.notes[#self.notes + 1] = ("workspace may not be kept: the claim could not be recorded as "
        .. "an owner of PersistentVolumeClaim %s (%s) — check the bot's Role on persistentvolumeclaims "
        .. "(deploy/kubernetes/bot-rbac.yaml)"):format(M.volume_name(self.thread_key), api_text(verr))
    end
  end
  self.claim = { ip = cs.ip, sandbox = cs.sandbox, until_ms = until_ms }
  self.inner = sandbox.new{
    url = pod_url(self, cs.ip), token = self.token, thread_key = self.thread_key, policy = self.policy,
    resolve_envs = self.resolve_envs, network = self.network, build = self.build,
  }
  core.log("info", "kubernetes.claimed", { claim = self.name, sandbox = cs.sandbox, adopted = adopted or false })
  return self.inner
end

-- After a failed operation: is the thread's pod gone? Read the claim, then watch it a moment
-- (timeouts kubernetes.gone_check_ms) for the controller to notice a pod that just died.
-- → why (a text) | nil
local function pod_gone(self, snap)
  local claim = self.claim
  local st, doc = self.api:call("GET", item(self))
  if st == nil then
    return doc.status == 404 and "its claim no longer exists" or nil
  end
  local function verdict(kind, obj)
    if kind == "DELETED" then return "its claim was deleted" end
    local s = kwatch.claim_state(obj)
    if s.deleting then return "its claim is being deleted" end
    if not s.ready then return ("the claim reports %s: %s"):format(s.reason or "not Ready", s.message or "") end
    if s.ip ~= claim.ip then return "the claim names another pod now" end
  end
  local why = verdict("RELIST", doc)
  if why then return why end
  local v = self.api:watch_until(watch_spec(self, kwatch.resource_version(doc) or "0",
    snap.timeouts.kubernetes.gone_check_ms, nil), verdict)
  return type(v) == "string" and v ~= "gone" and v or (v == "gone" and "its claim was deleted" or nil)
end

local function gone_error(self, why, err)
  if self.keep then
    return errors.infra(("the thread's pod went away under the command (%s, sandbox %s: %s) — what "
      .. "the command was doing is lost, but the workspace's files are kept on its volume; the next "
      .. "command claims a new pod with them (%s)")
      :format(where(self), tostring(self.claim and self.claim.sandbox or "?"), why, tostring(err)))
  end
  return errors.infra(("the thread's pod went away under the command (%s, sandbox %s: %s) — its "
    .. "workspace is lost; the next command claims a fresh pod: re-clone before continuing (%s)")
    :format(where(self), tostring(self.claim and self.claim.sandbox or "?"), why, tostring(err)))
end

-- Run one operation on the thread's pod; a failure that is the pod's absence says so.
local function on_pod(self, snap, need_ms, wait_for, signal, op)
  local inner, err = ensure(self, snap, need_ms, wait_for, signal)
  if not inner then return nil, err end
  local res = table.pack(op(inner))
  if res[1] == nil and errors.is_infra(res[2]) and not (signal and signal.aborted) then
    local why = pod_gone(self, snap)
    if why then
      local e = gone_error(self, why, res[2])
      sleep_now(self)
      return nil, e
    end
  end
  return table.unpack(res, 1, res.n)
end

local function stopped_result(snap, signal)
  return render.result(snap, { aborted = true, abort_reason = preflight.stop_reason(signal), stdout = "", stderr = "" })
end

-- The command is checked and its budget clamped once here (exec/preflight.lua); the pod's
-- sandbox executor resolves the credentials when it sends it.
function M:exec(command, opts)
  opts = opts or {}
  local call, refused = preflight.plan(self, command, opts)
  if not call then return nil, refused end
  local snap, limit = call.snap, call.budget_ms
  local need = limit + snap.timeouts.call.margin_ms
  local sub = {}
  for k, v in pairs(opts) do sub[k] = v end
  sub.snap = snap
  local r, err = on_pod(self, snap, need, limit, opts.signal, function(inner) return inner:exec(command, sub) end)
  if r == nil and err and err.kind == "aborted" then return stopped_result(snap, opts.signal) end
  return r, err
end

local function file_op(self, opts, op)
  opts = opts or {}
  local snap = opts.snap or self.policy()
  local b = snap.timeouts.file_op.budget_ms
  local sub = {}
  for k, v in pairs(opts) do sub[k] = v end
  sub.snap = snap
  local r, err = on_pod(self, snap, b + snap.timeouts.call.margin_ms, b, opts.signal, function(inner) return op(inner, sub) end)
  if r == nil and err and err.kind == "aborted" then return nil, errors.tool("file operation stopped: " .. preflight.stop_reason(opts.signal)) end
  return r, err
end

function M:read_file(path, opts)
  return file_op(self, opts, function(inner, sub) return inner:read_file(path, sub) end)
end

function M:write_file(path, bytes, opts)
  return file_op(self, opts, function(inner, sub) return inner:write_file(path, bytes, sub) end)
end

-- Background processes and exposed ports (docs/sandboxd.md): the pod's sandboxd has them as
-- any sandboxd; a preview URL names the pod's address, reachable where the pod is.
for _, name in ipairs({ "start_process", "processes", "process_logs", "kill_process", "expose_port", "unexpose_port" }) do
  M[name] = function(self, ...)
    local args = table.pack(...)
    local opts = args.n > 0 and type(args[args.n]) == "table" and args[args.n] or nil
    if opts == nil then args.n = args.n + 1 end
    return file_op(self, opts, function(inner, sub)
      args[args.n] = sub
      return inner[name](inner, table.unpack(args, 1, args.n))
    end)
  end
end

-- A process started here is remembered for the card (exec/process_notes.lua take_notes below).
local start_on_pod = M.start_process
function M:start_process(command, opts)
  local doc, err = start_on_pod(self, command, opts)
  if doc and type(doc.id) == "string" then process_notes.started(self, { id = doc.id, command = command }) end
  return doc, err
end

-- "always" (a hard stop, fail-fast): the pod and all that runs in it go now — the claim's
-- shutdownTime is now (its volume kept), or, without a kept workspace, the claim is deleted.
-- "if-clean": keep it for the thread's follow-ups; its shutdownTime releases it when idle.
function M:release(mode)
  if mode ~= "always" then return true end
  sleep_now(self)
  return true
end

-- The lines the card should show about the thread's workspace since the last call (it is not
-- kept: no workspace_size, or a template that refuses claims' volumes), taken once.
function M:take_notes()
  local notes = self.notes
  self.notes = {}
  if not self.keep and not self.said_unkept then
    self.said_unkept = true
    if #notes == 0 then
      notes[1] = "workspace not kept: kubernetes.workspace_size is not set (policies/execution.lua): "
        .. "this thread's files go when its pod sleeps"
    end
  end
  -- the background processes started here, as the pod it holds lists them (asked of the pod's
  -- sandboxd directly: the claim is not extended, nothing wakes); no pod held: they went with it
  local inner = self.inner
  for _, line in ipairs(process_notes.take(self, function() return inner and inner:processes() or {} end,
      "ended when the thread's pod slept")) do
    notes[#notes + 1] = line
  end
  return notes
end

-- The claim's name and pod while the thread holds one (notes, tests).
function M:claim_info()
  return self.claim and { name = self.name, sandbox = self.claim.sandbox, ip = self.claim.ip } or nil
end


---------------------------------------------------------------------------------------------
-- The backend's declaration (exec/backends.lua): Kubernetes with agent-sandbox
-- (docs/deploy.md): the API server from the pod's service account or a kubeconfig; sandboxd's
-- bearer from the variable policy names.
local schema = require("switchboard.policy.schema")
local S = schema.S

local function set(getenv, name)
  local v = name and getenv(name)
  return v ~= nil and v ~= ""
end

local function build(opts, ctx, snap, _, kit)
  if kit.network == "none" then
    return kit.no_offline("a kubernetes pod's network is its NetworkPolicy's",
      "use the sandbox backend for it (policies/execution.lua)")
  end
  local getenv = opts.getenv or os.getenv
  local cfg = snap.execution.kubernetes
  local token = getenv(cfg.token_env)
  if not token or token == "" then return kit.missing(cfg.token_env) end
  local conn, why = kapi.config{ getenv = getenv, kubeconfig_env = cfg.kubeconfig_env, sa_dir = opts.kube_sa_dir }
  if not conn then
    return kit.missing("a Kubernetes API server (" .. why.message .. ")")
  end
  local api = kapi.new(conn, { timeouts = function() return opts.policy().timeouts.kubernetes end })
  return M.new{
    api = api, namespace = cfg.namespace or conn.namespace, warm_pool = cfg.warm_pool, port = cfg.port,
    token = token, thread_key = ctx.thread_key, agent = ctx.agent, policy = opts.policy,
    resolve_envs = kit.resolve_envs, network = kit.network,
    build = core.build.commit,
    workspace = cfg.workspace_size and { size = cfg.workspace_size, storage_class = cfg.storage_class } or nil,
  }
end

-- Its part of policies/execution.lua: `kubernetes = {…}`.
local SETTINGS = S.record {
  token_env = schema.env_name, kubeconfig_env = schema.env_name,
  namespace = S.optional(S.string { one_line = true, pattern = "^[a-z0-9][-a-z0-9]*$", what = "a namespace name" }),
  warm_pool = S.string { one_line = true, pattern = "^[a-z0-9][-a-z0-9.]*$", what = "a SandboxWarmPool name" },
  port = S.int { min = 1, max = 65535 },
  workspace_size = S.optional(S.string { one_line = true, pattern = "^[1-9][0-9]*[KMGT]i$", what = "a volume size such as 5Gi" }),
  storage_class = S.optional(S.string { one_line = true, pattern = "^[a-z0-9][-a-z0-9.]*$", what = "a StorageClass name" }),
}

M.backend = {
  name = "kubernetes",
  help = "a pod per thread from agent-sandbox (docs/deploy.md)",
  settings = SETTINGS,
  configured = function(snap, getenv)
    local e = snap.execution.kubernetes
    return set(getenv, e.token_env) and (set(getenv, "KUBERNETES_SERVICE_HOST") or set(getenv, e.kubeconfig_env))
  end,
  build = build,
}

return M
