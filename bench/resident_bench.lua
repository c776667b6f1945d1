-- The resident's per-exec round trip (bench/README.md "resident"). Run from the repository root:
--
--   lua5.4 bench/resident_bench.lua [N=300] [ROUNDS=5]
--
-- Starts the real `switchboard resident` on loopback, onboards a local bare repository over a
-- file:// URL, and runs N sequential `true` through the local executor (in this process) and
-- through the resident executor (attach once, then executor → resident → the thread's worktree),
-- alternating per round. Then the attach: a repository of FILES files (SB_BENCH_FILES, 2000 of
-- 4 KiB) onboarded, A fresh threads attached (POST /attach, unwalled: the git work alone)
-- against the reference in the same run, a plain `git worktree add` of the same checkout at
-- the same commit; the disk each takes beyond the working tree (its .git; for the worktree,
-- its .git file plus the checkout's .git/worktrees/NAME). One JSON document on stdout: the
-- medians and the ratios.
local build = os.getenv("SB_BUILD_DIR") or "./build"
package.path = "./lua/?.lua;./lua/?/init.lua;./tests/lua/?.lua;" .. package.path
package.cpath = build .. "/lua/?.so;" .. package.cpath

local core = require("switchboard.core")
local cjson = require("cjson")
local S = require("support.sandbox")
local R = require("support.resident")
local policy = require("switchboard.policy")
-- the backends' and fronts' settings in the policy schema, as the binary loads them
require("switchboard.exec.backends")
require("switchboard.fronts.registry")
local resident = require("switchboard.exec.resident")
local localx = require("switchboard.exec.local")

core.log_format("text", "warn")

local median = require("bench.stats").median

local function round(x) return math.floor(x * 1000 + 0.5) / 1000 end

local n, rounds = tonumber(arg[1]) or 300, tonumber(arg[2]) or 5
local files, attaches = tonumber(os.getenv("SB_BENCH_FILES")) or 2000, 15

local function sh_out(cmd)
  local p = io.popen("env -u LD_PRELOAD sh -c '" .. cmd:gsub("'", "'\\''") .. "'")
  local out = p:read("a"); p:close()
  return out
end

local function du_kib(path) return tonumber(sh_out("du -sk " .. path):match("^(%d+)")) end

local function post(h, path, body, thread)
  return core.http.request{ method = "POST", url = h.url .. path, body = body, deadline_ms = 120000,
    headers = { authorization = "Bearer " .. R.TOKEN, ["content-type"] = "application/json", ["x-thread-key"] = thread } }
end

-- acme/big: FILES files in 40 directories, one commit; onboarded on the running resident.
local function attach_cost(h, base)
  R.sh(("cd %s && mkdir big && cd big && git init -q && for d in $(seq 1 40); do mkdir d$d; done"
    .. " && i=0; while [ $i -lt %d ]; do head -c 3072 /dev/urandom | base64 > d$((i %% 40 + 1))/f$i; i=$((i+1)); done"
    .. " && git add -A && git -c user.email=t@t -c user.name=t commit -qm big"
    .. " && git clone -q --bare %s/big %s/base/acme/big"):format(base, files, base, base))
  assert(post(h, "/onboard", '{"repo":"acme/big"}') == 202)
  S.wait_for(function()
    local _, _, raw = core.http.request{ method = "GET", url = h.url .. "/status?repo=acme/big",
      headers = { authorization = "Bearer " .. R.TOKEN }, deadline_ms = 10000 }
    return raw and raw:find('"warm"')
  end, 120000)
  local checkout = h.root .. "/repos/acme/big/checkout"
  local wt_root = S.tmpdir()
  local own, ref = {}, {}
  for i = 1, attaches do -- alternating: the resident's attach, then the plain worktree
    local t0 = core.now_ms()
    assert(post(h, "/attach", '{"repo":"acme/big"}', "attach-" .. i) == 200)
    own[i] = core.now_ms() - t0
    t0 = core.now_ms()
    sh_out(("git -C %s worktree add -q --detach %s/w%d origin/HEAD"):format(checkout, wt_root, i))
    ref[i] = core.now_ms() - t0
  end
  local thread = require("switchboard.shell.workspace").path(h.root .. "/threads", "attach-1")
  local own_git = du_kib(thread .. "/.git")
  local ref_git = du_kib(wt_root .. "/w1/.git") + du_kib(checkout .. "/.git/worktrees/w1")
  local tree = du_kib(wt_root .. "/w1") - du_kib(wt_root .. "/w1/.git")
  sh_out(("git -C %s worktree remove --force %s/w1"):format(checkout, wt_root))
  S.rm(wt_root)
  local a, w = median(own), median(ref)
  return { files = files, attaches = attaches, resident_attach_ms = round(a), worktree_add_ms = round(w),
    ratio = round(a / w), tree_kib = tree, thread_git_kib = own_git, worktree_git_kib = ref_git,
    checkout_objects_kib = du_kib(checkout .. "/.git/objects") }
end

core.run(function()
  local dir = R.policy_dir()
  assert(policy.load_initial(dir))
  local base = R.make_base()
  local h = R.start(base, { policies = dir })
  local status = core.http.request{ method = "POST", url = h.url .. "/onboard", body = '{"repo":"acme/api"}',
    headers = { authorization = "Bearer " .. R.TOKEN, ["content-type"] = "application/json" }, deadline_ms = 10000 }
  assert(status == 202)
  S.wait_for(function()
    local _, _, raw = core.http.request{ method = "GET", url = h.url .. "/status?repo=acme/api",
      headers = { authorization = "Bearer " .. R.TOKEN }, deadline_ms = 10000 }
    return raw and raw:find('"warm"')
  end, 60000)
  local root = S.tmpdir()
  local lx = localx.new{ root = root, thread_key = "bench", policy = policy.current }
  local rx = resident.new{ url = h.url, token = R.TOKEN, thread_key = "bench", repo = "acme/api", policy = policy.current }
  local function per_exec_ms(ex)
    local times = {}
    for i = 1, n do
      local t0 = core.now_ms()
      local r = assert(ex:exec("true"))
      assert(r.exit_code == 0)
      times[i] = core.now_ms() - t0
    end
    return median(times)
  end
  per_exec_ms(lx); per_exec_ms(rx) -- warm up both (the resident attaches here)
  local loc, res = {}, {}
  for r = 1, rounds do
    loc[r] = per_exec_ms(lx)
    res[r] = per_exec_ms(rx)
  end
  local attach = attach_cost(h, base)
  h.stop("TERM"); h.wait()
  S.rm(root); S.rm(base); S.rm(h.root)
  local l, rr = median(loc), median(res)
  io.write(cjson.encode{ n = n, rounds = rounds, local_ms = round(l), resident_ms = round(rr),
    added_ms = round(rr - l), ratio = round(rr / l), attach = attach }, "\n")
end)
