-- The kubernetes executor against the Kubernetes API stand-in (tests/support/kube_standin.py:
-- HTTPS, SandboxClaims with agent-sandbox's status, watches with bookmarks, 409, 410, 429) whose
-- "pods" are real `switchboard sandboxd --pod` processes (docs/deploy.md "Kubernetes with
-- agent-sandbox").
local core = require("switchboard.core")
local cjson = require("cjson")
local async = require("support.async")
local S = require("support.sandbox")
local K = require("support.kube")
local errors = require("switchboard.exec.errors")
local kube = require("switchboard.exec.kubernetes")

-- sleep_after 2 s and a 2 s call margin: a claim's shutdownTime lands within seconds of its last
-- command, so the sleep is seen inside the test
local FAST = S.FAST .. [[
call.margin_ms = 2 * second
kubernetes.gone_check_ms = 10 * second -- a bound for a loaded machine: the stand-in sees a dead pod at once
]]
local snap, policy_dir = S.snapshot(FAST)
local function policy() return snap end

local seq = 0
local function key(prefix)
  seq = seq + 1
  return ("%s-%d-%s"):format(prefix, seq, core.crypto.hex(core.crypto.random_bytes(3)))
end

local h
local function executor(k, extra)
  local o = { policy = policy, thread_key = k }
  for kk, v in pairs(extra or {}) do o[kk] = v end
  return K.executor(h, o)
end

local function pod_of(name)
  for _, p in ipairs(h.pods()) do if p.claim == name then return p end end
end

describe("kubernetes executor", function()
  setup(function() core.run(function() h = K.start{ policies = policy_dir, pool_size = 2 } end) end)
  teardown(function() core.run(function() h.stop() end) end)

  it("the first ask creates one claim, labelled with the thread, and runs in its pod", async(function()
    local k = key("first")
    local ex = executor(k)
    local creates, gets = h:count("create"), h:count("get")
    local r = assert(ex:exec("echo hello"))
    assert.equal(0, r.exit_code)
    assert.equal("hello", r.text)
    assert.equal(creates + 1, h:count("create"))
    local c = h:claim(kube.claim_name(k))
    assert.truthy(c and c.exists)
    assert.equal(kube.thread_label(k), c.labels["openswitchboard.dev/thread"])
    assert.equal(K.POOL, c.spec.warmPoolRef.name)
    assert.equal("Delete", c.spec.lifecycle.shutdownPolicy)
    assert.truthy(c.spec.lifecycle.shutdownTime:match("^%d%d%d%d%-%d%d%-%d%dT%d%d:%d%d:%d%dZ$"))
    -- the pod is the one the claim's status names, and its sandboxd runs in pod mode
    local pod = assert(pod_of(c.name))
    assert.equal(c.pod, pod.name)
    local status, _, body = core.http.request{ url = ("http://%s:%d/healthz"):format(pod.ip, h.pod_port),
      headers = { authorization = "Bearer " .. S.TOKEN }, deadline_ms = 30000 }
    assert.equal(200, status)
    assert.equal("pod", cjson.decode(body).mode)
    -- it waited through a watch, never polled the claim
    assert.equal(gets, h:count("get"))
    assert.is_true(h:count("watch") >= 1)
  end))

  it("follow-ups reuse the claim and its workspace; a later process adopts it (409)", async(function()
    local k = key("follow")
    local ex = executor(k)
    assert(ex:exec("echo kept > marker"))
    local creates = h:count("create")
    assert.equal("kept", assert(ex:exec("cat marker")).text)
    assert.is_true(ex:write_file("f.txt", "bytes"))
    assert.equal("bytes", ex:read_file("f.txt"))
    assert.equal(creates, h:count("create"))
    -- a new executor object on the same thread (the bot restarted): its create is answered 409
    -- AlreadyExists, and it adopts the thread's own claim
    local again = executor(k)
    assert.equal("kept", assert(again:exec("cat marker")).text)
    assert.equal(creates + 1, h:count("create"))
    assert.equal(ex:claim_info().sandbox, again:claim_info().sandbox)
  end))

  it("works with the service account's token, CA and namespace too", async(function()
    local ex = executor(key("sa"), { via = "service-account" })
    assert.equal("sa", assert(ex:exec("echo sa")).text)
  end))

  it("works with a kubeconfig whose user is a client certificate; a server of another CA is refused", async(function()
    local ex = executor(key("cert"), { via = "client-certificate" })
    assert.equal("cert", assert(ex:exec("echo cert")).text)
    -- the same server, trusted through another CA (the client CA): TLS refuses it, nothing is sent
    local kapi = require("switchboard.exec.kubernetes_api")
    local cfg = assert(kapi.config{ getenv = function(n) return n == "KUBECONFIG" and h:kubeconfig() or nil end })
    local f = assert(io.open(h.dir .. "/client-ca.crt"))
    cfg.ca_pem = f:read("a")
    f:close()
    local api = kapi.new(cfg, { timeouts = function() return snap.timeouts.kubernetes end })
    local st, failure = api:call("GET", "/apis/extensions.agents.x-k8s.io/v1beta1/namespaces/switchboard/sandboxclaims/x")
    assert.is_nil(st)
    assert.equal("transport", failure.kind)
  end))

  it("idle sleep releases the claim (shutdownTime passes), and the next ask gets a fresh pod", async(function()
    local k = key("sleep")
    local ex = executor(k)
    -- a budget a cold instance's start fits in on a loaded machine (it counts against budget + margin)
    assert(ex:exec("echo here > marker", { timeout_ms = 5000 }))
    local name = kube.claim_name(k)
    local first_pod = h:claim(name).pod
    -- budget 5 s + margin 2 s + 2 × sleep_after 2 s: gone within seconds, bounded generously
    local released = S.wait_for(function() return not h:claim(name).exists end, 60000)
    assert.is_true(released, "the idle claim was not released")
    assert.is_nil(pod_of(name))
    local r = ex:exec("cat marker")
    -- the pod went while idle: the follow-up says so (infra), and the one after runs in a fresh pod
    if r == nil then
      r = assert(ex:exec("cat marker"))
    end
    assert.equal(1, r.exit_code)
    assert.are_not.equal(first_pod, h:claim(name).pod)
  end))

  it("a pod dying mid-command is infra, and the next ask gets a fresh claim", async(function()
    local k = key("die")
    local ex = executor(k)
    assert(ex:exec("echo before > marker"))
    local name = kube.claim_name(k)
    local pod = h:claim(name).pod
    local res, err
    local done = core.signal()
    core.go(function()
      res, err = ex:exec("touch running; sleep 30")
      done:abort("finished")
    end)
    assert.is_true(S.wait_for(function() return ex:read_file("running") ~= nil end, 30000))
    h:kill(name)
    core.sleep(60000, done)
    assert.is_true(done.aborted, "the command did not end when its pod died")
    assert.is_nil(res)
    assert.is_true(errors.is_infra(err), tostring(err))
    assert.matches("went away under the command", tostring(err))
    assert.matches(name, tostring(err), 1, true)
    assert.matches("re%-clone", tostring(err))
    local creates = h:count("create")
    local r = assert(ex:exec("cat marker"))
    assert.equal(1, r.exit_code) -- a fresh, empty workspace
    assert.is_true(h:count("create") > creates)
    assert.are_not.equal(pod, h:claim(name).pod)
  end))

  it("after a pod is lost, the fresh claim's clone continues on the thread's branch", async(function()
    -- a repository with the thread's branch on its remote (file://, so no network)
    local dir = S.tmpdir()
    local branch = "switchboard/t-kube"
    assert(os.execute(("set -e; cd %s; git init -q -b main src; cd src; git -c user.email=a@b -c user.name=a "
      .. "commit -q --allow-empty -m base; git checkout -q -b %s; echo on-thread > thread.txt; git add thread.txt; "
      .. "git -c user.email=a@b -c user.name=a commit -q -m thread; git checkout -q main; "
      .. "git clone -q --bare . ../acme-api.git"):format(dir, branch)))
    local gsnap = {}
    for k, v in pairs(snap) do gsnap[k] = v end
    gsnap.github = {}
    for k, v in pairs(snap.github) do gsnap.github[k] = v end
    gsnap.github.clone_url = "file://" .. dir .. "/{repo}.git"
    local repo = require("switchboard.agent.repo")
    local k = key("branch")
    local ex = executor(k)
    local done, on_branch = repo.prepare(ex, gsnap, "acme-api", { branch = branch })
    assert.equal("cloned", done, tostring(on_branch))
    assert.equal(branch, on_branch)
    h:kill(kube.claim_name(k))
    local r, err = ex:exec("cat thread.txt")
    assert.is_nil(r)
    assert.is_true(errors.is_infra(err), tostring(err))
    done, on_branch = repo.prepare(ex, gsnap, "acme-api", { branch = branch })
    assert.equal("cloned", done, tostring(on_branch)) -- a fresh workspace: cloned, not fetched
    assert.equal(branch, on_branch)
    assert.equal("on-thread", assert(ex:exec("cat thread.txt")).text)
    S.rm(dir)
  end))

  it("a watch cut mid-stream is resumed from its resourceVersion; a compacted one is relisted", async(function()
    h:pool(0)
    -- the executor's wait for a ready pod (fleet_busy.max_wait_ms, 3 s in FAST) must outlast
    -- the cuts, the resume and the relist below: seconds each on a loaded machine
    local patient = S.snapshot(FAST .. "\nfleet_busy.max_wait_ms = 120 * second\n")
    local ex = executor(key("cut"), { policy = function() return patient end })
    local res, err
    local done = core.signal()
    core.go(function()
      res, err = ex:exec("echo through", { timeout_ms = 60000 })
      done:abort("finished")
    end)
    -- the executor waits on a watch (no pod is ready): cut it
    assert.is_true(S.wait_for(function() return h.watches().open >= 1 end, 30000))
    local opened = h.watches().opened
    -- cut until one is cut: the watch seen open may be between its reconnects at that instant
    assert.is_true(S.wait_for(function() return h.cut_watches() >= 1 end, 30000))
    assert.is_true(S.wait_for(function() return h.watches().opened > opened and h.watches().open >= 1 end, 30000))
    -- now forget the history and cut again: the resumed watch gets 410 Expired and relists
    h.compact()
    h.cut_watches()
    assert.is_true(S.wait_for(function() return (ex.api.relists or 0) >= 1 end, 30000))
    h:pool(2)
    core.sleep(60000, done)
    assert.is_true(done.aborted)
    assert.equal("through", assert(res, tostring(err)).text)
    assert.is_true(ex.api.resumes >= 1)
    assert.is_true(ex.api.relists >= 1)
  end))

  it("no ready pod in the pool is the capacity wait, then ExecCapacityError; the claim is withdrawn", async(function()
    h:pool(0)
    local k = key("full")
    local ex = executor(k)
    local r, err = ex:exec("echo hi", { timeout_ms = 3000 })
    h:pool(2)
    assert.is_nil(r)
    assert.is_true(errors.is_capacity(err), tostring(err))
    assert.matches("no pod of warm pool", tostring(err))
    assert.is_true(S.wait_for(function() return not h:claim(kube.claim_name(k)).exists end, 30000))
  end))

  it("a quota refusal (403 exceeded quota) waits like a full fleet", async(function()
    local f = {}
    for i = 1, 10 do
      f[i] = { on = "create", status = 403, reason = "Forbidden",
        message = 'sandboxclaims.extensions.agents.x-k8s.io "x" is forbidden: exceeded quota: claims, requested: count/sandboxclaims.extensions.agents.x-k8s.io=1' }
    end
    h:faults(f)
    local r, err = executor(key("quota")):exec("echo hi", { timeout_ms = 3000 })
    assert.is_nil(r)
    assert.is_true(errors.is_capacity(err), tostring(err))
    assert.matches("quota", tostring(err))
    -- spend the faults the wait left over
    for _ = 1, 10 do if executor(key("drain")):exec("true") then break end end
  end))

  it("429 with Retry-After is waited out and sent again", async(function()
    h:faults({ { on = "create", status = 429, reason = "TooManyRequests", message = "too many requests", retry_after = 1 } })
    local creates = h:count("create")
    local t0 = core.now_ms()
    local r = assert(executor(key("429")):exec("echo ok"))
    assert.equal("ok", r.text)
    assert.equal(creates + 2, h:count("create"))
    assert.is_true(core.now_ms() - t0 >= 1000, "the Retry-After was not waited")
  end))

  it("a watch answered 429 with Retry-After is opened again after the wait", async(function()
    h:faults({ { on = "watch", status = 429, reason = "TooManyRequests", message = "too many requests", retry_after = 1 } })
    local watches = h:count("watch")
    local r = assert(executor(key("w429")):exec("echo watched"))
    assert.equal("watched", r.text)
    assert.is_true(h:count("watch") >= watches + 2)
  end))

  it("a warm pool that does not exist is infra naming the controller's reason", async(function()
    local r, err = executor(key("nopool"), { pool = "missing" }):exec("echo hi")
    assert.is_nil(r)
    assert.is_true(errors.is_infra(err), tostring(err))
    assert.matches("WarmPoolNotFound", tostring(err))
  end))

  it("the factory builds it from the environment; without a bearer or a cluster it says what to set", async(function()
    local factory = require("switchboard.exec.factory")
    local function build(getenv)
      return factory.make_executor({ policy = policy, force_backend = "kubernetes", workspace_root = "/nonexistent",
        getenv = getenv, kube_sa_dir = h.dir .. "/no-such-dir" }, { thread_key = key("factory"), agent = "coding" })
    end
    local sel = assert(build(h:getenv()))
    assert.equal("kubernetes", sel.backend)
    -- the kubeconfig's namespace and the policy's warm pool reach the pod the claim names
    sel.executor.port = h.pod_port
    assert.equal("built", assert(sel.executor:exec("echo built")).text)
    local _, err = build(h:getenv({ SANDBOX_TOKEN = "" }))
    assert.matches("agent coding runs on the kubernetes backend, but SANDBOX_TOKEN is not set", tostring(err))
    _, err = build(function(n) return n == "SANDBOX_TOKEN" and S.TOKEN or nil end)
    assert.matches("KUBECONFIG", tostring(err))
    assert.is_true(factory.configured(snap, { getenv = h:getenv() }).kubernetes)
  end))

  it("a hard stop's release deletes the claim at once", async(function()
    local k = key("rel")
    local ex = executor(k)
    assert(ex:exec("true"))
    ex:release("always")
    assert.is_true(S.wait_for(function() return not h:claim(kube.claim_name(k)).exists end, 30000))
  end))
end)

-- The thread's workspace kept across the pod's sleep (issue 37): a claim with a volume named
-- "workspace" and shutdownPolicy Retain, the claim recorded as an owner of the PVC
-- agent-sandbox makes, so the volume outlives each Sandbox and its pod.
describe("kubernetes executor: the kept workspace", function()
  local hk
  local WS = { size = "1Gi" }
  setup(function() core.run(function() hk = K.start{ policies = policy_dir, pool_size = 0 } end) end)
  teardown(function() core.run(function() hk.stop() end) end)

  local function kept(k, extra)
    local o = { policy = policy, thread_key = k, workspace = WS }
    for kk, v in pairs(extra or {}) do o[kk] = v end
    return K.executor(hk, o)
  end
  local function owners(pvc)
    local by = {}
    for _, r in ipairs(pvc.ownerReferences) do by[r.kind] = r end
    return by
  end
  local function pod_alive(name)
    for _, p in ipairs(hk.pods()) do if p.claim == name and p.alive then return p end end
  end

  it("the pod sleeps at its shutdownTime, the claim and its volume stay, and the next ask finds the files", async(function()
    local k = key("keep")
    local ex = kept(k)
    assert(ex:exec("echo kept > marker", { timeout_ms = 5000 }))
    local name = kube.claim_name(k)
    local c = hk:claim(name)
    assert.equal("Retain", c.spec.lifecycle.shutdownPolicy)
    assert.equal("workspace", c.spec.volumeClaimTemplates[1].metadata.name)
    -- the PVC agent-sandbox made, with the claim as its second owner (not its controller)
    local pvc = assert(hk:pvc(kube.volume_name(k)), "no PersistentVolumeClaim " .. kube.volume_name(k))
    local by = owners(pvc)
    assert.truthy(by.Sandbox and by.Sandbox.controller, "the Sandbox is not the volume's controller")
    assert.truthy(by.SandboxClaim, "the claim is not an owner of the volume")
    assert.is_nil(by.SandboxClaim.controller)
    assert.equal(kube.name_hash(name), pvc.labels["agents.x-k8s.io/sandbox-name-hash"])
    local first = pod_alive(name)
    assert.truthy(first)
    -- budget 5 s + margin 2 s + 2 × sleep_after 2 s: the pod goes within seconds
    assert.is_true(S.wait_for(function() return pod_alive(name) == nil end, 60000), "the idle pod did not sleep")
    assert.is_true(hk:claim(name).exists, "the claim went with its pod (Retain)")
    assert.truthy(hk:pvc(kube.volume_name(k)), "the volume went with the pod's Sandbox")
    local r = assert(ex:exec("cat marker"))
    assert.equal(0, r.exit_code)
    assert.equal("kept", r.text)
    assert.are_not.equal(first.pid, pod_alive(name).pid)
    assert.same({}, ex:take_notes())
  end))

  it("a hard stop sleeps the pod and keeps the files; a later process adopts the retained claim", async(function()
    local k = key("stopkeep")
    local ex = kept(k)
    assert(ex:exec("echo stopped-but-kept > marker"))
    local name = kube.claim_name(k)
    ex:release("always")
    assert.is_true(S.wait_for(function() return pod_alive(name) == nil end, 30000))
    assert.is_true(hk:claim(name).exists)
    local again = kept(k) -- the bot restarted: 409, adopted, moved forward, a new pod on the volume
    assert.equal("stopped-but-kept", assert(again:exec("cat marker")).text)
  end))

  it("a pod that dies under a command is infra saying the files are kept; the next ask has them", async(function()
    local k = key("diekeep")
    local ex = kept(k)
    assert(ex:exec("echo survived > marker"))
    local name = kube.claim_name(k)
    local res, err
    local done = core.signal()
    core.go(function()
      res, err = ex:exec("touch running; sleep 30")
      done:abort("finished")
    end)
    assert.is_true(S.wait_for(function() return ex:read_file("running") ~= nil end, 30000))
    hk:kill(name)
    core.sleep(60000, done)
    assert.is_true(done.aborted)
    assert.is_nil(res)
    assert.is_true(errors.is_infra(err), tostring(err))
    assert.matches("files are kept on its volume", tostring(err))
    assert.equal("survived", assert(ex:exec("cat marker")).text)
  end))

  it("a retained claim past record.retention_ms is deleted, and its volume with it", async(function()
    local k = key("expired")
    local ex = kept(k)
    assert(ex:exec("true"))
    local name = kube.claim_name(k)
    ex:release("always")
    assert.is_true(S.wait_for(function() return pod_alive(name) == nil end, 30000))
    -- another thread claims a pod a record's lifetime later
    local later = kept(key("later"), { wall_ms = function() return core.wall_ms() + snap.record.retention_ms + 2 * 3600 * 1000 end })
    assert(later:exec("true"))
    assert.is_true(S.wait_for(function() return not hk:claim(name).exists end, 30000), "the expired claim was not deleted")
    assert.is_true(S.wait_for(function() return hk:pvc(kube.volume_name(k)) == nil end, 30000), "its volume outlived it")
  end))

  it("the stand-in's PersistentVolumeClaims answer as the API server does", async(function()
    local api = kept(key("api")).api
    local base = "/api/v1/namespaces/" .. K.NAMESPACE .. "/persistentvolumeclaims"
    local body = { apiVersion = "v1", kind = "PersistentVolumeClaim", metadata = { name = "pvc-shape" },
      spec = { accessModes = { "ReadWriteOnce" }, resources = { requests = { storage = "1Gi" } } } }
    local st, doc = api:call("POST", base, body)
    assert.equal(201, st)
    assert.truthy(doc.metadata.uid and doc.metadata.resourceVersion)
    local again, f = api:call("POST", base, body)
    assert.is_nil(again)
    assert.equal(409, f.status)
    assert.equal("AlreadyExists", f.reason)
    assert.equal(200, (api:call("GET", base .. "/pvc-shape")))
    -- a merge-patch carrying an old resourceVersion is refused, as a precondition
    local stale
    stale, f = api:call("PATCH", base .. "/pvc-shape", { metadata = { labels = { a = "b" }, resourceVersion = "1" } },
      { content_type = "application/merge-patch+json" })
    assert.is_nil(stale)
    assert.equal(409, f.status)
    assert.equal("Conflict", f.reason)
    assert.equal(200, (api:call("DELETE", base .. "/pvc-shape")))
    local gone
    gone, f = api:call("GET", base .. "/pvc-shape")
    assert.is_nil(gone)
    assert.equal(404, f.status)
    assert.equal("NotFound", f.reason)
  end))

  it("without a workspace size the card says the workspace is not kept", async(function()
    local ex = K.executor(hk, { policy = policy, thread_key = key("unkept") })
    local notes = ex:take_notes()
    assert.equal(1, #notes)
    assert.matches("workspace not kept: kubernetes.workspace_size is not set", notes[1])
    assert.same({}, ex:take_notes())
  end))
end)

describe("kubernetes executor: a template that refuses claims' volumes", function()
  local hd
  setup(function() core.run(function() hd = K.start{ policies = policy_dir, pool_size = 1, vct_policy = "Disallowed" } end) end)
  teardown(function() core.run(function() hd.stop() end) end)

  it("claims again without one, runs the command, and the card says the workspace is not kept", async(function()
    local k = key("refused")
    local ex = K.executor(hd, { policy = policy, thread_key = k, workspace = { size = "1Gi" } })
    assert.equal("ran", assert(ex:exec("echo ran")).text)
    local c = hd:claim(kube.claim_name(k))
    assert.equal("Delete", c.spec.lifecycle.shutdownPolicy)
    assert.is_nil(c.spec.volumeClaimTemplates)
    local notes = ex:take_notes()
    assert.equal(1, #notes)
    assert.matches("workspace not kept: the SandboxTemplate of warm pool", notes[1])
    assert.matches("volumeClaimTemplatesPolicy", notes[1])
  end))
end)

teardown(function() S.cleanup() end)
