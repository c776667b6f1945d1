-- The resident end to end on loopback (issue 13 items 1-2, docs/resident.md): the real
-- `switchboard resident` binary onboarding a real git repository over a file:// URL, the real
-- resident executor and factory talking to it, real processes and real signals.
local core = require("switchboard.core")
local cjson = require("cjson")
local S = require("support.sandbox")
local policies = require("support.policies")
local resident = require("switchboard.exec.resident")
local factory = require("switchboard.exec.factory")
local health = require("switchboard.exec.health")
local errors = require("switchboard.exec.errors")
local workspace = require("switchboard.shell.workspace")
local R = require("support.resident")

local TOKEN = S.TOKEN

local policy_dir = R.policy_dir
local sh, make_base = R.sh, R.make_base
local function start(base, opts) return R.start(base, opts) end

local function call(h, method, path, body, thread)
  local status, _, raw = core.http.request{ method = method, url = h.url .. path,
    headers = { authorization = "Bearer " .. TOKEN, ["x-thread-key"] = thread or "T1", ["content-type"] = "application/json" },
    body = body and cjson.encode(body) or nil, deadline_ms = 30000 }
  local ok, doc = pcall(cjson.decode, raw or "")
  return status, ok and doc or raw
end

local function state_of(h, repo)
  local status, doc = call(h, "GET", "/status?repo=" .. repo)
  if status == 404 then return "404", doc end
  return doc.state, doc
end

-- Waits until the repository is in `want`, and returns the status document that said so: the
-- scheduled refresh moves a degraded repository on (onboarding, "install: trying again"), so a
-- second request after the wait may read the state after it.
local function wait_state(h, repo, want, ms)
  local seen
  assert.truthy(S.wait_for(function()
    local state, doc = state_of(h, repo)
    seen = doc
    return state == want
  end, ms or 120000), ("%s never became %s (last: %s)"):format(repo, want, seen and seen.state))
  return seen
end

local function onboard(h, repo)
  assert.equal(202, (call(h, "POST", "/onboard", { repo = repo })))
  local state
  assert.truthy(S.wait_for(function() state = state_of(h, repo); return state ~= "onboarding" end, 60000))
  return state
end

local function new_ex(h, snap, opts)
  opts = opts or {}
  return resident.new{ url = h.url, token = TOKEN, thread_key = opts.thread or "T1", repo = "acme/api",
    policy = function() return snap end, request = opts.request }
end

-- Tools this spec runs itself must not inherit the sanitizer runtime preloaded into the
-- interpreter under the ASan build (ps deadlocked on it).
local NO_PRELOAD = "env -u LD_PRELOAD "

local function alive(pid) return os.execute(("kill -0 %d 2>/dev/null"):format(pid)) == true end

describe("resident server and executor on loopback", function()
  local base, dir, snap
  before_each(function()
    base = make_base()
    dir = policy_dir()
    snap = assert(policies.load(dir))
    factory.forget_probes()
  end)
  after_each(function()
    S.cleanup_servers()
    S.rm(base)
  end)

  it("onboards once (clone + install), answers /status, attaches a repository of its own borrowing the checkout's objects, with its deps", function()
    core.run(function()
      local h = start(base, { policies = dir })
      assert.equal("404", (state_of(h, "acme/api")))
      local _, doc = state_of(h, "acme/nope")
      assert.matches("repo onboard acme/nope", doc.error, 1, true)
      assert.equal("warm", onboard(h, "acme/api"))
      local checkout = h.root .. "/repos/acme/api/checkout"
      assert.equal("installed\n", S.read(checkout .. "/deps/ok"))
      local status, a = call(h, "POST", "/attach", { repo = "acme/api" })
      assert.equal(200, status)
      assert.is_false(a.reused)
      local wt = workspace.path(h.root .. "/threads", "T1")
      -- its own .git (refs, index, HEAD), the checkout's objects through alternates: not one
      -- object copied; origin is the upstream, not the checkout's path
      assert.equal(checkout .. "/.git/objects\n", S.read(wt .. "/.git/objects/info/alternates"))
      local function git(d, args)
        local p = io.popen((NO_PRELOAD .. "git -C %s %s 2>&1"):format(d, args)); local out = p:read("a"); p:close()
        return out
      end
      assert.matches("\ncount: 0\n.*\nsize%-pack: 0\n", "\n" .. git(wt, "count-objects -v"))
      assert.equal("file://" .. base .. "/base/acme/api\n", git(wt, "remote get-url origin"))
      assert.equal(git(checkout, "rev-parse origin/HEAD"), git(wt, "rev-parse HEAD"))
      assert.equal(a.commit .. "\n", git(wt, "rev-parse HEAD"))
      assert.equal("installed\n", S.read(wt .. "/deps/ok"))
      -- a push from the thread reaches the upstream (origin), with the objects it borrows
      local ex = new_ex(h, snap)
      local r = assert(ex:exec("git checkout -q -b pushed && echo more >> README && git -c user.email=t@t "
        .. "-c user.name=t commit -qam pushed && git push -q origin pushed 2>&1 && git rev-parse HEAD && git status --porcelain"))
      assert.equal(0, r.exit_code, r.text)
      assert.equal(git(base .. "/base/acme/api", "rev-parse pushed"), r.text .. "\n")
      assert.equal("", git(checkout, "branch --list pushed")) -- the checkout's refs: untouched
      -- a failed onboarding is degraded with its reason
      assert.equal("degraded", onboard(h, "acme/missing"))
      local _, d = state_of(h, "acme/missing")
      assert.matches("^clone failed", d.reason)
      h.stop(); assert.equal(0, h.wait().exit)
    end)
  end)

  it("executor: attach before the first command, sandboxd's wire protocol, timeoutMs only when asked, budget + 30 s", function()
    core.run(function()
      local h = start(base, { policies = dir })
      assert.equal("warm", onboard(h, "acme/api"))
      local sent = {}
      local ex = new_ex(h, snap, { request = function(req)
        sent[#sent + 1] = req
        return core.http.request(req)
      end })
      local r = assert(ex:exec("cat deps/ok; pwd"))
      assert.equal(0, r.exit_code)
      assert.matches("^installed\n.*/threads/T1%-", r.text)
      assert.equal(h.url .. "/attach", sent[1].url)
      assert.equal(h.url .. "/exec", sent[2].url)
      assert.is_nil(cjson.decode(sent[2].body).timeoutMs)
      assert.equal(snap.timeouts.bash.default_ms + snap.timeouts.call.margin_ms, sent[2].deadline_ms)
      r = assert(ex:exec("sleep 5", { timeout_ms = 300 }))
      assert.equal(300, cjson.decode(sent[3].body).timeoutMs)
      assert.equal(300 + snap.timeouts.call.margin_ms, sent[3].deadline_ms)
      assert.matches("^exit 124:", r.text)
      r = assert(ex:exec("echo out; exit 3"))
      assert.equal("exit 3: out", r.text)
      assert(ex:write_file("notes/a.txt", "bytes"))
      assert.equal("bytes", ex:read_file("notes/a.txt"))
      local _, err = ex:read_file("../../escape")
      assert.is_true(errors.is_tool(err))
      assert.equal(1, #(function() local n = {} for _, q in ipairs(sent) do if q.url:find("/attach$") then n[#n + 1] = q end end return n end)())
      h.stop(); h.wait()
    end)
  end)

  it("re-attaches once when the worktree is gone; gone again right after is infra/attach", function()
    core.run(function()
      local h = start(base, { policies = dir })
      assert.equal("warm", onboard(h, "acme/api"))
      local attaches, evict = 0, false
      local wt = workspace.path(h.root .. "/threads", "T1")
      local ex = new_ex(h, snap, { request = function(req)
        local status, headers, body = core.http.request(req)
        if req.url:find("/attach$") then
          attaches = attaches + 1
          if evict then sh("rm -rf " .. wt) end
        end
        return status, headers, body
      end })
      assert(ex:exec("echo one > f"))
      sh("rm -rf " .. wt) -- evicted under the thread
      local r = assert(ex:exec("ls"))
      assert.equal(2, attaches)
      assert.matches("README", r.text)
      evict = true
      sh("rm -rf " .. wt)
      local _, err = ex:exec("ls")
      assert.is_true(errors.is_infra(err))
      assert.equal("infra/attach", err.code)
      assert.equal(3, attaches) -- the one re-attach, and no more
      h.stop(); h.wait()
    end)
  end)

  it("runtime replaced under a command: once an ordinary result (health untouched), twice in a row infra", function()
    core.run(function()
      local root = S.tmpdir()
      local h = start(base, { policies = dir, root = root })
      assert.equal("warm", onboard(h, "acme/api"))
      local ex = new_ex(h, snap)
      local tracked = health.new(ex, snap)
      tracked.count = 1 -- one infra failure before: the replacement must neither add nor reset
      local runs = 0
      local function replaced_run(server)
        local out = {}
        runs = runs + 1
        local mark = "started-" .. runs -- each run's own: the worktree outlives the runtime
        core.go(function() out.r, out.err = tracked:exec(("echo started > %s; sleep 60"):format(mark)) end)
        assert.truthy(S.wait_for(function()
          return core.fs.exists(workspace.path(root .. "/threads", "T1") .. "/" .. mark)
        end, 120000))
        server.stop("TERM") -- a deploy: drain (1 s), then the command is killed
        assert.truthy(S.wait_for(function() return out.r or out.err end, 30000))
        assert.equal(0, server.wait().exit)
        return out
      end
      local first = replaced_run(h)
      assert.is_nil(first.err)
      assert.equal(127, first.r.exit_code)
      assert.matches("runtime replaced", first.r.text)
      assert.equal(1, tracked.count)
      -- the next runtime, on the same root: the worktree is kept, the thread attaches again
      local h2 = start(base, { policies = dir, root = root })
      assert.truthy(S.wait_for(function() return state_of(h2, "acme/api") == "warm" end, 120000))
      ex.client.url = h2.url; ex.wire.url = h2.url -- the next runtime's address
      local second = replaced_run(h2)
      assert.is_nil(second.r)
      assert.is_true(errors.is_infra(second.err))
      assert.equal("infra/runtime-replaced", second.err.code)
      assert.equal(2, tracked.count)
      -- and a success resets the run of replacements
      local h3 = start(base, { policies = dir, root = root })
      assert.truthy(S.wait_for(function() return state_of(h3, "acme/api") == "warm" end, 120000))
      ex.client.url = h3.url; ex.wire.url = h3.url
      local r = assert(tracked:exec("cat started-1 started-2"))
      assert.equal("started\nstarted", r.text)
      assert.equal(0, ex.replaced)
      h3.stop(); h3.wait()
      S.rm(root)
    end)
  end)

  it("hard stop: release('always') sends /detach force — the thread's processes die, the worktree is evicted", function()
    core.run(function()
      local h = start(base, { policies = dir })
      assert.equal("warm", onboard(h, "acme/api"))
      local ex = new_ex(h, snap)
      local wt = workspace.path(h.root .. "/threads", "T1")
      local out = {}
      core.go(function() out.r, out.err = ex:exec("sleep 300 & echo $! > pid; wait") end)
      local pid = S.wait_for(function() return tonumber(S.read(wt .. "/pid") or "") end, 120000)
      assert.truthy(pid)
      assert.is_true(alive(pid))
      assert(ex:release("always"))
      assert.truthy(S.wait_for(function() return not alive(pid) end, 60000))
      assert.truthy(S.wait_for(function() return out.r or out.err end, 60000))
      assert.is_false(core.fs.exists(wt))
      h.stop(); h.wait()
    end)
  end)

  it("factory: warm → resident; 404, degraded (disk full), cold and unreachable fall back with their notes", function()
    core.run(function()
      local root = S.tmpdir()
      local h = start(base, { policies = dir, root = root })
      local probes = 0
      local env = { RESIDENT_URL = h.url, RESIDENT_TOKEN = TOKEN, SANDBOX_URL = "http://127.0.0.1:9", SANDBOX_TOKEN = "x" }
      local function make(repo, s)
        return factory.make_executor({ policy = function() return s or snap end, getenv = function(n) return env[n] end,
          force_backend = "resident", resident_request = function(req) probes = probes + 1; return core.http.request(req) end },
          { thread_key = "T9", agent = "coding", repo = repo, snap = s or snap })
      end
      local b = assert(make("acme/api"))
      assert.equal("sandbox", b.backend)
      assert.equal("resident: acme/api is not onboarded — onboard it once with `repo onboard acme/api` "
        .. "(or `switchboard resident onboard acme/api`) — using fresh sandbox", b.note)
      assert.equal("warm", onboard(h, "acme/api"))
      b = assert(make("acme/api"))
      assert.equal("resident", b.backend)
      assert.equal("resident", b.executor.backend)
      assert.is_nil(b.note)
      h.stop(); h.wait()
      -- disk full: the same root restarted where less than min_free_mb is free
      local full = policy_dir("resident.min_free_mb = 1024 * 1024 * 1024")
      h = start(base, { policies = full, root = root })
      env.RESIDENT_URL = h.url
      assert.truthy(S.wait_for(function() return state_of(h, "acme/api") == "degraded" end, 120000))
      b = assert(make("acme/api"))
      assert.equal("sandbox", b.backend)
      assert.equal("resident degraded (disk full) — using fresh sandbox", b.note)
      h.stop(); h.wait()
      -- cold: restarted, not fetched yet
      h = start(base, { policies = policy_dir("resident.warm_after_start_ms = 10 * minute"), root = root })
      env.RESIDENT_URL = h.url
      b = assert(make("acme/api"))
      assert.equal("resident cold (not fetched since the resident started) — using fresh sandbox", b.note)
      h.stop(); h.wait()
      -- unreachable: the probe fails once, then the failure is remembered (no second probe)
      local before = probes
      b = assert(make("acme/api"))
      assert.matches("^resident unreachable %(", b.note)
      assert.equal(before + 1, probes)
      b = assert(make("acme/api"))
      assert.matches("^resident unreachable %(a probe failed in the last 30 s%) — using fresh sandbox$", b.note)
      assert.equal(before + 1, probes)
      -- a fallback that cannot be made says first why the resident was not used (before: only
      -- "SANDBOX_URL is not set", as if the resident had never been asked)
      env.SANDBOX_URL = nil
      local none, err = make("acme/api")
      assert.is_nil(none)
      assert.matches("^resident unreachable %(a probe failed in the last 30 s%), so this falls back to a fresh "
        .. "sandbox: agent coding runs on the sandbox backend, but SANDBOX_URL is not set", err.message)
      S.rm(root)
    end)
  end)

  it("`switchboard exec --agent coding --repo` chooses the resident when warm and says why when not", function()
    core.run(function()
      local h = start(base, { policies = dir })
      local sb = S.start_sandboxd{ policies = dir }
      local function cli(repo)
        local env = S.base_env{ RESIDENT_URL = h.url, RESIDENT_TOKEN = TOKEN, SANDBOX_URL = sb.url, SANDBOX_TOKEN = S.TOKEN }
        local proc = assert(core.spawn{ argv = { S.BIN, "--policies", dir, "exec", "--agent", "coding", "--repo", repo,
          "--backend", "resident", "--thread", "cli-T", "--", "cat README 2>&1; pwd" }, env = env })
        return proc:wait()
      end
      local function resident_cli(...)
        local env = S.base_env{ RESIDENT_URL = h.url, RESIDENT_TOKEN = TOKEN }
        local proc = assert(core.spawn{ argv = { S.BIN, "--policies", dir, "resident", ... }, env = env })
        return proc:wait()
      end
      local st = resident_cli("status", "acme/api")
      assert.equal(1, st.exit)
      assert.matches("^acme/api: not onboarded", st.stdout)
      st = resident_cli("onboard", "acme/api", "--wait")
      assert.equal(0, st.exit, st.stderr)
      assert.equal("acme/api: warm\n", st.stdout)
      st = resident_cli("status", "acme/api")
      assert.equal("acme/api: warm\n", st.stdout)
      local r = cli("acme/api")
      assert.equal(0, r.exit)
      assert.matches("^hello\n.*/threads/cli%-T%-", r.stdout)
      assert.is_nil(r.stderr:find("resident", 1, true), r.stderr) -- no fallback note
      r = cli("acme/nope")
      assert.matches("note: resident: acme/nope is not onboarded — onboard it once with `repo onboard acme/nope`", r.stderr, 1, true)
      assert.matches("using fresh sandbox", r.stderr, 1, true)
      assert.matches("No such file", r.stdout) -- ran in a fresh, empty sandbox workspace
      h.stop(); h.wait(); sb:stop(); sb:wait()
    end)
  end)

  it("`repo onboard OWNER/REPO` from a front: parsed, sent to the resident, answered in the thread", function()
    core.run(function()
      local parser = require("switchboard.dispatch.parser")
      assert.same({ kind = "onboard", repo = "acme/api" }, parser.parse("@switchboard repo onboard acme/api"))
      assert.same({ kind = "onboard", repo = "acme/api" }, parser.parse("repo onboard https://github.com/acme/api"))
      assert.equal("malformed", parser.parse("repo onboard").kind)
      local h = start(base, { policies = dir })
      local env = { RESIDENT_URL = h.url, RESIDENT_TOKEN = TOKEN }
      local text = resident.onboard_text(snap, function(n) return env[n] end, "acme/api")
      assert.matches("^Onboarding acme/api on the resident", text)
      assert.truthy(S.wait_for(function() return state_of(h, "acme/api") == "warm" end, 120000))
      text = resident.onboard_text(snap, function(n) return env[n] end, "acme/api")
      assert.equal("acme/api is already onboarded and warm on the resident; its asks run there.", text)
      assert.matches("RESIDENT_URL is not set", resident.onboard_text(snap, function() return nil end, "acme/api"))
      h.stop(); h.wait()
    end)
  end)

  it("a runtime that died without answering: a dropped connection and a new generation on /healthz is runtime-replaced", function()
    core.run(function()
      local root = S.tmpdir()
      local h = start(base, { policies = dir, root = root })
      assert.equal("warm", onboard(h, "acme/api"))
      local h2
      local ex = new_ex(h, snap, { request = function(req)
        local status, headers, body = core.http.request(req)
        if status == nil and req.url:find("/exec$") and not h2 then
          h2 = start(base, { policies = dir, root = root, listen = "127.0.0.1:" .. h.port })
        end
        return status, headers, body
      end })
      local wt = workspace.path(root .. "/threads", "T1")
      local out = {}
      core.go(function() out.r, out.err = ex:exec("echo $$ > started; sleep 60") end)
      local pid = S.wait_for(function() return tonumber(S.read(wt .. "/started") or "") end, 120000)
      assert.truthy(pid)
      h.stop("KILL")
      assert.truthy(S.wait_for(function() return out.r or out.err end, 30000))
      os.execute("kill -KILL -" .. pid .. " 2>/dev/null") -- the orphaned command's group (the test started it)
      assert.is_nil(out.err)
      assert.equal(127, out.r.exit_code)
      assert.matches("runtime replaced", out.r.text)
      assert.is_false(ex.attached)
      h2.stop(); h2.wait()
      S.rm(root)
    end)
  end)

  it("keeps warm on the policy's schedule: a new commit reaches new worktrees; a failed fetch degrades, the next good one heals", function()
    core.run(function()
      local h = start(base, { policies = dir })
      assert.equal("warm", onboard(h, "acme/api"))
      sh(("cd %s/src && echo two > NEW && git add NEW && git -c user.email=t@t -c user.name=t commit -qm two"
        .. " && git push -q %s/base/acme/api HEAD:refs/heads/$(git symbolic-ref --short HEAD)"):format(base, base))
      local checkout = h.root .. "/repos/acme/api/checkout"
      assert.truthy(S.wait_for(function()
        return os.execute((NO_PRELOAD .. "git -C %s cat-file -e origin/HEAD:NEW 2>/dev/null"):format(checkout)) == true
      end, 120000), "the scheduled fetch did not bring the new commit")
      local ex = new_ex(h, snap, { thread = "T-new" })
      assert.equal("two", assert(ex:exec("cat NEW")).text)
      sh(("mv %s/base/acme/api %s/base/acme/api.away"):format(base, base))
      local doc = wait_state(h, "acme/api", "degraded")
      assert.matches("^fetch failed: git fetch exited", doc.reason)
      sh(("mv %s/base/acme/api.away %s/base/acme/api"):format(base, base))
      assert.truthy(S.wait_for(function() return state_of(h, "acme/api") == "warm" end, 120000))
      h.stop(); h.wait()
    end)
  end)

  it("a fetch that changes the install's file re-runs the install; one that does not, does not; a failed re-install is degraded until a good one", function()
    core.run(function()
      local h = start(base, { policies = dir })
      assert.equal("warm", onboard(h, "acme/api"))
      local checkout = h.root .. "/repos/acme/api/checkout"
      local installs = h.root .. "/repos/acme/api/installs.log"
      local function push(file, text)
        sh(("cd %s/src && printf '%%s' '%s' > %s && git add -A && git -c user.email=t@t -c user.name=t commit -qm %s"
          .. " && git push -q %s/base/acme/api HEAD:refs/heads/$(git symbolic-ref --short HEAD)"):format(base, text, file, file, base))
      end
      local function runs() local t = S.read(installs) or ""; local n = 0; for _ in t:gmatch("\n") do n = n + 1 end; return n end
      -- the install's file changes: the next fetch installs again (deps/ok says v2; one run logged)
      push("setup.sh", "mkdir -p deps && echo installed v2 > deps/ok && echo run >> ../installs.log\n")
      assert.truthy(S.wait_for(function() return S.read(checkout .. "/deps/ok") == "installed v2\n" end, 120000),
        "the fetch that changed setup.sh did not re-run the install")
      assert.truthy(S.wait_for(function() return state_of(h, "acme/api") == "warm" end, 120000))
      assert.equal(1, runs())
      -- a new thread starts from the new commit with the new dependencies
      local ex = new_ex(h, snap, { thread = "T-v2" })
      assert.equal("installed v2", assert(ex:exec("cat deps/ok")).text)
      -- a commit that leaves setup.sh alone: fetched (NEW2, then NEW3 after it), no install
      push("NEW2", "two")
      assert.truthy(S.wait_for(function() return S.read(checkout .. "/NEW2") end, 120000))
      push("NEW3", "three")
      assert.truthy(S.wait_for(function() return S.read(checkout .. "/NEW3") end, 120000))
      assert.equal(1, runs())
      -- a re-install that fails: degraded with the install's reason; fixed upstream, warm again
      push("setup.sh", "echo no such registry >&2; exit 7\n")
      local doc = wait_state(h, "acme/api", "degraded")
      assert.equal("install failed: `sh setup.sh` exited 7: no such registry", doc.reason)
      push("setup.sh", "mkdir -p deps && echo installed v3 > deps/ok && echo run >> ../installs.log\n")
      assert.truthy(S.wait_for(function() return state_of(h, "acme/api") == "warm" end, 120000))
      assert.equal("installed v3\n", S.read(checkout .. "/deps/ok"))
      assert.equal(2, runs())
      h.stop(); h.wait()
    end)
  end)

  it("git inside walled threads: status, log, diff, a commit on a branch; private to the thread; the shared objects read-only", function()
    core.run(function()
      local h = R.start_walled(base, { policies = dir }, pending)
      if not h then return end
      assert.equal("warm", onboard(h, "acme/api"))
      local checkout = h.root .. "/repos/acme/api/checkout"
      local function host_git(args)
        local p = io.popen((NO_PRELOAD .. "git -C %s %s 2>&1"):format(checkout, args)); local out = p:read("a"); p:close()
        return out
      end
      local function host_has(object)
        return os.execute((NO_PRELOAD .. "git -C %s cat-file -e %s 2>/dev/null"):format(checkout, object)) == true
      end
      local refs_before = host_git("for-each-ref")
      local one, two = new_ex(h, snap, { thread = "T-one" }), new_ex(h, snap, { thread = "T-two" })
      local id = "-c user.email=t@t -c user.name=t"
      local r = assert(one:exec("id -u; git status --porcelain; echo edited >> README; git status --short; "
        .. "git diff --stat | tail -1; git log --oneline | wc -l; git checkout -q -b feature && git " .. id
        .. " commit -qam mine && git rev-parse HEAD && git log -1 --format=%s && git remote get-url origin"))
      assert.equal(0, r.exit_code, r.text)
      local lines = {}
      for l in r.text:gmatch("[^\n]+") do lines[#lines + 1] = l end
      assert.equal("1000", lines[1])
      assert.equal(" M README", lines[2])
      assert.matches("1 file changed, 1 insertion", lines[3])
      assert.equal("1", lines[4])
      local sha = lines[5]
      assert.matches("^%x+$", sha)
      assert.equal(40, #sha)
      assert.equal("mine", lines[6])
      assert.equal("file://" .. base .. "/base/acme/api", lines[7])
      -- the other thread sees neither the branch nor the commit; nor does the warm checkout
      r = assert(two:exec(("git branch --list feature | wc -l; git cat-file -e %s 2>/dev/null && echo has || echo missing; "
        .. "git status --porcelain | wc -l; git rev-parse --abbrev-ref HEAD"):format(sha)))
      assert.equal("0\nmissing\n0\nHEAD", r.text)
      assert.equal(refs_before, host_git("for-each-ref"))
      assert.is_true(host_has("HEAD"))
      assert.is_false(host_has(sha))
      -- the shared objects are there read-only: writing into them fails, as a file or through git
      r = assert(one:exec("alt=$(cat .git/objects/info/alternates); test -d \"$alt\" && echo bound; "
        .. "touch \"$alt/pwned\" 2>&1; echo unshared | GIT_OBJECT_DIRECTORY=\"$alt\" git hash-object -w --stdin 2>&1"))
      assert.equal(128, r.exit_code) -- git's own failure to write there
      assert.matches("^exit 128: bound\ntouch: cannot touch '[^']*/pwned': Read%-only file system\n", r.text)
      assert.matches("error: unable to create temporary file: Read-only file system", r.text, 1, true)
      assert.is_false(core.fs.exists(checkout .. "/.git/objects/pwned"))
      local p = io.popen(NO_PRELOAD .. "sh -c 'echo unshared | git hash-object --stdin'"); local unshared = p:read("l"); p:close()
      assert.is_false(host_has(unshared))
      -- the thread's own commit survives a re-attach of the same thread (its repository is kept)
      r = assert(one:exec("git rev-parse feature"))
      assert.equal(sha, r.text)
      h.stop(); h.wait()
    end)
  end)

  it("every route is behind the bearer, checked with the head (sandboxd's on_head); thread routes need a key", function()
    core.run(function()
      local h = start(base, { policies = dir })
      for path, method in pairs(require("switchboard.resident.routes").ROUTES) do
        for _, tok in ipairs({ "", "wrong", TOKEN .. "x" }) do
          local status, _, raw = core.http.request{ method = method, url = h.url .. path .. "?repo=acme/api",
            headers = { authorization = "Bearer " .. tok, ["x-thread-key"] = "T1" },
            body = method == "POST" and '{"repo":"acme/api","command":"touch pwned"}' or nil, deadline_ms = 10000 }
          assert.equal(401, status, path)
          assert.equal('{"error":"unauthorized"}', raw)
        end
      end
      assert.equal(404, (call(h, "GET", "/nope")))
      local status, _, raw = core.http.request{ method = "POST", url = h.url .. "/attach", body = '{"repo":"acme/api"}',
        headers = { authorization = "Bearer " .. TOKEN }, deadline_ms = 10000 }
      assert.equal(400, status)
      assert.matches("x%-thread%-key", raw)
      assert.is_nil(io.open(h.root .. "/threads/pwned"))
      h.stop(); h.wait()
    end)
  end)

  it("behind the walls (where the kernel gives them): a uid of its own that owns the worktree; detach kills it all", function()
    core.run(function()
      local h = R.start_walled(base, { policies = dir }, pending)
      if not h then return end
      assert.matches('walls="cgroup v', h.log())
      assert.equal("warm", onboard(h, "acme/api"))
      local ex = new_ex(h, snap)
      local r = assert(ex:exec("id -u; echo edited >> README && tail -1 README; cat deps/ok"))
      assert.equal("1000\nedited\ninstalled", r.text)
      local wt = workspace.path(h.root .. "/threads", "T1")
      local out = {}
      core.go(function() out.r, out.err = ex:exec("sleep 300 & echo $! > pid; wait") end)
      assert.truthy(S.wait_for(function() return S.read(wt .. "/pid") end, 120000))
      local function walled_sleeps()
        local p = io.popen(NO_PRELOAD .. [[sh -c "ps -eo user:20,args | grep '[s]leep 300' | grep -v '^root ' | wc -l"]])
        local n = tonumber(p:read("a")); p:close()
        return n
      end
      assert.truthy(S.wait_for(function() return walled_sleeps() >= 1 end, 60000))
      assert(ex:release("always"))
      assert.truthy(S.wait_for(function() return out.r or out.err end, 60000))
      assert.truthy(S.wait_for(function() return walled_sleeps() == 0 end, 60000), "the thread's sleep outlived /detach")
      assert.is_false(core.fs.exists(wt))
      h.stop(); h.wait()
    end)
  end)
end)
