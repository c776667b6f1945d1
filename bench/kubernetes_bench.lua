-- The kubernetes backend against the Kubernetes API stand-in, in the same run as its reference
-- (bench/README.md "Kubernetes with agent-sandbox"). Run from the repository root after a build:
--
--   lua5.4 bench/kubernetes_bench.lua [FIRSTS=10] [N=200] [ROUNDS=5]
--
-- 1. First ask to first output with a warm pool: FIRSTS times, a new thread's first `echo`
--    through the kubernetes executor (create the SandboxClaim, watch it to Ready, /healthz, /exec
--    in the pod), each with the pool full and ready. The stand-in's own latency — from the create
--    it received to the Ready it wrote, its controller's time (tests/support/kube_standin.py's
--    timing) — is subtracted; what is left is the executor's, the API round trips and the
--    pod's first command. The first command of a new thread on the sandbox executor against a
--    `sandboxd --pod` on loopback (the same server the pod runs) is measured alongside.
-- 2. A follow-up's overhead: N sequential `true` per round on a claimed pod through the
--    kubernetes executor, and through the sandbox executor against a `sandboxd --pod` of the same
--    kind, alternating per round; the median per exec of each, their ratio and the milliseconds
--    the kubernetes executor adds.
-- The load average is reported with the figures. One JSON document on stdout.
local build = os.getenv("SB_BUILD_DIR") or "./build"
package.path = "./lua/?.lua;./lua/?/init.lua;./tests/lua/?.lua;./tests/?.lua;" .. package.path
package.cpath = build .. "/lua/?.so;" .. package.cpath
local loadavg = require("bench.stats").loadavg

local core = require("switchboard.core")
local cjson = require("cjson")
local S = require("support.sandbox")
local K = require("support.kube")
local kube = require("switchboard.exec.kubernetes")

core.log_format("text", "warn")

local median = require("bench.stats").median

local function round(x, digits)
  local m = 10 ^ (digits or 2)
  return math.floor(x * m + 0.5) / m
end

local POOL = 2

local function main(firsts, n, rounds)
  firsts, n, rounds = tonumber(firsts) or 10, tonumber(n) or 200, tonumber(rounds) or 5
  -- the shipped policy, with the sandbox's idle sleep long enough for the whole run
  local snap, policy_dir = S.snapshot('sandbox.sleep_after = "30m"')
  local function policy() return snap end
  local load_before = loadavg()
  local h = K.start{ policies = policy_dir, pool_size = POOL }
  local function pool_ready()
    return S.wait_for(function()
      local ready = 0
      for _, p in ipairs(h.pods()) do if p.ready and p.claim == cjson.null then ready = ready + 1 end end
      return ready >= POOL
    end, 60000)
  end

  -- 1. first ask → first output, warm pool
  local first, standin, ours, ref_first = {}, {}, {}, {}
  for i = 1, firsts do
    assert(pool_ready(), "the warm pool did not fill")
    local key = ("bench-first-%d-%s"):format(i, core.crypto.hex(core.crypto.random_bytes(3)))
    local ex = K.executor(h, { policy = policy, thread_key = key, build = core.build.commit })
    local t0 = core.now_ms()
    local r = assert(ex:exec("echo first"))
    local dt = core.now_ms() - t0
    assert(r.text == "first")
    local c = h:claim(kube.claim_name(key))
    local own = c.ready_ms - c.created_ms
    first[#first + 1], standin[#standin + 1], ours[#ours + 1] = dt, own, dt - own
    ex:release("always")
  end
  local pod = S.start_sandboxd{ policies = policy_dir, args = { "--pod" } }
  for i = 1, firsts do
    -- a pod-mode sandboxd serves one thread: one server per first ask, like one pod per thread
    local p = i == 1 and pod or S.start_sandboxd{ policies = policy_dir, args = { "--pod" } }
    local ex = require("switchboard.exec.sandbox").new{ url = p.url, token = S.TOKEN,
      thread_key = "bench-ref-" .. i, policy = policy, build = core.build.commit }
    local t0 = core.now_ms()
    assert(ex:exec("echo first"))
    ref_first[#ref_first + 1] = core.now_ms() - t0
    if i > 1 then p:stop(); p:wait() end
  end

  -- 2. follow-ups on a claimed pod vs the sandbox executor on a sandboxd --pod
  assert(pool_ready(), "the warm pool did not fill")
  local kex = K.executor(h, { policy = policy, thread_key = "bench-follow" })
  local sex = require("switchboard.exec.sandbox").new{ url = pod.url, token = S.TOKEN,
    thread_key = "bench-ref-1", policy = policy }
  local execs = { kubernetes = kex, sandbox = sex }
  local order = { "sandbox", "kubernetes" }
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
  for _, name in ipairs(order) do per_exec_ms(execs[name]) end -- warm up
  local per = { kubernetes = {}, sandbox = {} }
  for _ = 1, rounds do
    for _, name in ipairs(order) do per[name][#per[name] + 1] = per_exec_ms(execs[name]) end
  end
  kex:release("always")
  local k_ms, s_ms = median(per.kubernetes), median(per.sandbox)
  local out = {
    firsts = firsts, n = n, rounds = rounds, warm_pool = POOL,
    loadavg_before = load_before, loadavg_after = loadavg(),
    first_ask = {
      total_ms = round(median(first)), standin_ms = round(median(standin)),
      executor_ms = round(median(ours)), sandbox_pod_first_ms = round(median(ref_first)),
      executor_over_sandbox_first = round(median(ours) / median(ref_first)),
    },
    follow_up = {
      kubernetes_ms = round(k_ms, 3), sandbox_ms = round(s_ms, 3),
      ratio = round(k_ms / s_ms, 3), added_ms = round(k_ms - s_ms, 3),
    },
  }
  pod:stop(); pod:wait()
  h.stop()
  S.cleanup()
  io.stdout:write(cjson.encode(out), "\n")
end

core.run(main, ...)
