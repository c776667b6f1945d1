-- The benches' smoke tier (issue 28): a small run of the shipped sandboxd benches, so that a
-- bench that cannot pass (the 2,000-concurrent one was refused by the per-peer cap for months)
-- breaks the suite instead of silently. Nothing here is timed: the runs must complete.
local cjson = require("cjson")

local BUILD = os.getenv("SB_BUILD_DIR") or "./build"

local function run(cmd)
  -- the bench is lua5.4 like busted: under the sanitized build it needs the same preload
  local p = assert(io.popen(("SB_BUILD_DIR=%s %s 2>&1"):format(BUILD, cmd)))
  local out = p:read("a")
  local ok = p:close()
  return ok, out
end

local function last_json(out)
  local line
  for l in out:gmatch("[^\n]+") do if l:sub(1, 1) == "{" then line = l end end
  assert(line, "no JSON line in:\n" .. out)
  return cjson.decode(line)
end

describe("bench smoke", function()
  it("sandbox_bench concurrent: every command completes through the bench's own overlay", function()
    local ok, out = run(require("support.preload").shell_prefix() .. "lua5.4 bench/sandbox_bench.lua concurrent 60 1 250")
    assert.is_true(ok, out)
    local r = last_json(out)
    assert.equal(60, r.commands)
    assert.equal(60, r.completed, out)
    assert.equal(0, r.failures, out)
  end)

  it("sandbox_bench threads500 at 60 threads: every one completes, none fails, the loop's lag is reported", function()
    local ok, out = run(require("support.preload").shell_prefix() .. "lua5.4 bench/sandbox_bench.lua threads500 60")
    assert.is_true(ok, out)
    local r = last_json(out)
    assert.equal("threads500", r.mode)
    assert.equal(60, r.commands)
    assert.equal(60, r.completed, out)
    assert.equal(0, r.failures, out)
    -- sandboxd's /metrics said how late its loop ran (a figure, not a goal: the smoke tier is untimed)
    assert.is_number(r.loop_lag_p99_ms, out)
    assert.is_number(r.peak_starts_waiting, out)
  end)

  -- --no-walls here is a bench contender beside the walled sandboxd (how much of the cost is the
  -- walls' hop), not the path an operator takes: the walled server is measured in the same run
  it("issue43.sh: a small run of the paired rows with the floor and --no-walls, its table and its JSON lines", function()
    local preload = require("support.preload").ld_preload
    local lua = preload and ("env LD_PRELOAD=" .. preload .. " lua5.4") or "lua5.4"
    local file = require("support.tmp").name("issue43")
    local ok, out = run(("ISSUE43_OUT=%s ISSUE43_PAIRED='4 1 1 1' ISSUE43_THREADS=0 ISSUE43_CONC=0 "
      .. "SB_BENCH_NO_BUILD=1 LUA='%s' bench/issue43.sh 1"):format(file, lua))
    local text = assert(io.open(file)):read("a")
    os.remove(file)
    assert.is_true(ok, out)
    local line = cjson.decode(text:match("[^\n]+"))
    assert.equal("paired", line.part, text)
    local r = assert(line.result, text)
    -- every contender answered every request (a refusal or a broken answer counts as an error)
    for _, part in ipairs{ "seq", "big" } do
      for _, who in ipairs{ "sandboxd", "nowalls", "floor", "node" } do
        assert.equal(0, r[part][who].errors, part .. " " .. who .. ": " .. text)
        assert.equal(1, r[part][who].connections, part .. " " .. who .. ": " .. text)
      end
    end
    -- the 1 MB row's bound beside it: the relays answered the megabyte on one connection each,
    -- and cat ÷ each of the bound's contenders is reported
    for _, who in ipairs{ "relay", "relayjson", "relaysplice" } do
      assert.equal(0, r.big[who].errors, "big " .. who .. ": " .. text)
      assert.equal(1, r.big[who].connections, "big " .. who .. ": " .. text)
      assert.is_number(r["big_vs_cat_" .. who], text)
    end
    assert.is_number(r.big_vs_cat_catwide, text)
    assert.equal(0, r.big.catwide.errors, text)
    for _, who in ipairs{ "sandboxd", "nowalls", "floor", "node" } do
      assert.equal(0, r.rate[who].errors, "rate " .. who .. ": " .. text)
      assert.is_true(r.server_cpu_us[who] > 0, text)
    end
    assert.is_number(r.floor_cost_over_raw_ms, text)
    assert.matches("| Node's added cost ÷ sandboxd's | ≥ 8× |", out, 1, true)
    assert.matches("| — the floor's added cost (bench_floor_server, ms) |", out, 1, true)
    assert.matches("| — information, the row's bound: `cat` ÷ catpipe / catwide (pipe widened) / relay / relayjson / relaysplice |", out, 1, true)
  end)

  it("ttfb: every scenario's asks reach the model stand-in and the bench reports them", function()
    local ok, out = run(require("support.preload").shell_prefix() .. "lua5.4 bench/ttfb.lua 2 1 1")
    assert.is_true(ok, out)
    local r = last_json(out)
    assert.equal(2, r.scenarios.warm.n, out)
    assert.equal(1, r.scenarios.warm_restart.n, out)
    assert.equal(1, r.scenarios.cold_repo.n, out)
    assert.equal(1, r.scenarios.cold.n, out)
    assert.equal(2, r.scenarios.slack_warm.n, out)
    assert.equal(1, r.scenarios.slack_warm_restart.n, out)
    assert.equal(1, r.scenarios.slack_cold_repo.n, out)
    assert.equal(1, r.scenarios.slack_cold.n, out)
    for _, s in pairs(r.scenarios) do assert.is_true(s.p50_ms > 0, out) end
    assert.is_true(r.cached_share.p50 >= 0 and r.cached_share.p50 <= 1, out)
  end)

  it("the concurrent overlay lets the shipped 2,000 clients from one address in", function()
    package.path = "./lua/?.lua;./lua/?/init.lua;./tests/lua/?.lua;" .. package.path
    local text = dofile("bench/sandbox_bench_overlay.lua").concurrent_overlay(2000, 1000)
    local per_peer = tonumber(text:match("server%.max_connections_per_peer = (%d+)"))
    local total = tonumber(text:match("server%.max_connections = (%d+)"))
    assert.is_true(per_peer >= 2000 and total >= 2000, text)
  end)

  it("the concurrent overlay's walls let 2,000 instances fit the host's file table", function()
    package.path = "./lua/?.lua;./lua/?/init.lua;./tests/lua/?.lua;" .. package.path
    local overlay = dofile("bench/sandbox_bench_overlay.lua")
    local policies = require("support.policies")
    local schema = require("switchboard.policy.schema")
    local dir = policies.dir{
      timeouts = function(src) return src .. "\n" .. overlay.concurrent_overlay(2000, 1000) .. "\n" end,
      isolation = function(src) return src .. "\n" .. overlay.CONCURRENT_ISOLATION .. "\n" end,
    }
    local snap = assert(policies.load(dir))
    assert.is_nil(schema.fleet_files_problem(snap.isolation, 2000))
    policies.cleanup()
  end)
end)
