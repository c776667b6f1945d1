-- The budget's numbers: keepalive constants (docs/contract.md#heartbeat), the token reuse
-- margin (#credential-freshness), send deadlines (#timeout-send-deadline), the clamp and run
-- clip (#timeout-clamp, #timeout-run-clip) and the fleet-busy wait schedule (#capacity).
local P = require("support.policies")
local budget = require("switchboard.shell.budget")
local errors = require("switchboard.exec.errors")

local S, MIN = 1000, 60 * 1000

describe("timeouts policy (shipped values)", function()
  local snap, t
  setup(function()
    snap = P.shipped()
    t = snap.timeouts
  end)

  it("item 12: default 5 min, ceiling 20 min, floor 1 s, kill grace 10 s, run reserve 60 s", function()
    assert.equal(5 * MIN, t.bash.default_ms)
    assert.equal(20 * MIN, t.bash.max_ms)
    assert.equal(1 * S, t.bash.floor_ms)
    assert.equal(10 * S, t.bash.kill_grace_ms)
    assert.equal(60 * S, t.run.reserve_ms)
  end)

  it("item 11: call margin 30 s; file ops 5 min; item 3: heartbeat 15 s; item 2: server default 280 s", function()
    assert.equal(30 * S, t.call.margin_ms)
    assert.equal(5 * MIN, t.file_op.budget_ms)
    assert.equal(15 * S, t.sandbox.heartbeat_ms)
    assert.equal(280 * S, t.sandbox.default_budget_ms)
  end)

  it("items 4, 8, 14: container retry 3 s once, recycle threshold 60 s, fleet waits", function()
    assert.equal(3 * S, t.container_starting.retry_after_ms)
    assert.equal(1, t.container_starting.retries)
    assert.equal(60 * S, t.recycle.threshold_ms)
    assert.same({ 10 * S, 20 * S }, { t.fleet_busy.waits_ms[1], t.fleet_busy.waits_ms[2] })
    assert.equal(2, #t.fleet_busy.waits_ms)
    assert.equal(30 * S, t.fleet_busy.every_ms)
    assert.equal(5 * MIN, t.fleet_busy.max_wait_ms)
  end)

  it("fail-fast after 2 infra failures in a row; 1 MiB per stream; TERM drain 30 s; card refresh 1 s", function()
    assert.equal(2, t.health.max_consecutive_infra_failures)
    assert.equal(1024 * 1024, t.process.max_output_bytes)
    assert.equal(30 * S, t.server.drain_ms)
    assert.equal(1 * S, t.console.refresh_ms)
  end)

  it("item 2: parse_sleep_after reads the s/m/h grammar and rejects anything else", function()
    assert.equal(30 * S, budget.parse_sleep_after("30s"))
    assert.equal(5 * MIN, budget.parse_sleep_after("5m"))
    assert.equal(2 * 60 * MIN, budget.parse_sleep_after("2h"))
    for _, bad in ipairs({ "5", "5 m", "5min", "0m", "-1m", "1.5h", "m", "", "5M", "5d", " 5m" }) do
      local v, why = budget.parse_sleep_after(bad)
      assert.is_nil(v, bad)
      assert.is_string(why)
    end
    assert.is_nil((budget.parse_sleep_after(300)))
    assert.is_nil((budget.parse_sleep_after(nil)))
  end)

  it("item 5: a cached token is reused only while it outlives the longest command + 5 min", function()
    assert.equal(5 * MIN, t.token.reuse_slack_ms)
    assert.equal(t.bash.max_ms + 5 * MIN, t.token.reuse_margin_ms)
    assert.is_true(t.token.reuse_margin_ms >= t.bash.max_ms + 5 * MIN)
  end)
end)

describe("budget.clamp (item 12, every branch)", function()
  local snap
  setup(function() snap = P.shipped() end)

  it("a 25-min ask runs at 20 min", function()
    assert.equal(20 * MIN, budget.clamp(snap, 25 * MIN))
    assert.equal(20 * MIN, budget.clamp(snap, 20 * MIN))
    assert.equal(20 * MIN, budget.clamp(snap, 1e300))
  end)

  it("0 and negative run at the 1 s floor", function()
    assert.equal(S, budget.clamp(snap, 0))
    assert.equal(S, budget.clamp(snap, -5))
    assert.equal(S, budget.clamp(snap, -1e300))
    assert.equal(S, budget.clamp(snap, 0.4))
  end)

  it("a finite number is truncated", function()
    assert.equal(1500, budget.clamp(snap, 1500.9))
    assert.equal(360000, budget.clamp(snap, 360000))
    assert.equal("integer", math.type(budget.clamp(snap, 1500.9)))
  end)

  it("absent, NaN, infinite or not a number falls back to the 5-min default", function()
    assert.equal(5 * MIN, budget.clamp(snap, nil))
    assert.equal(5 * MIN, budget.clamp(snap, 0 / 0))
    assert.equal(5 * MIN, budget.clamp(snap, math.huge))
    assert.equal(5 * MIN, budget.clamp(snap, -math.huge))
    assert.equal(5 * MIN, budget.clamp(snap, "600000"))
    assert.equal(5 * MIN, budget.clamp(snap, true))
    assert.equal(5 * MIN, budget.clamp(snap, {}))
  end)

  it("a server clamps with the same bounds and its own 280 s default", function()
    assert.equal(280 * S, budget.server_budget(snap, nil))
    assert.equal(280 * S, budget.server_budget(snap, "x"))
    assert.equal(20 * MIN, budget.server_budget(snap, 25 * MIN))
    assert.equal(S, budget.server_budget(snap, -1))
    assert.equal(360000, budget.server_budget(snap, 360000))
  end)

  it("follows the policy: a lowered ceiling is the new clamp", function()
    local lowered = assert(P.load(P.dir({ timeouts = function(src) return src .. "\nbash.max_ms = 10 * minute\n" end })))
    assert.equal(10 * MIN, budget.clamp(lowered, 25 * MIN))
    P.cleanup()
  end)
end)

describe("budget.within_run (item 12: clipped to the run)", function()
  local snap
  setup(function() snap = P.shipped() end)

  it("plenty of run left changes nothing: the request passes through, no request stays no request", function()
    local plan = assert(budget.within_run(snap, 360000, 25 * MIN))
    assert.equal(360000, plan.timeout_ms)
    assert.is_nil(plan.clip_line)
    plan = assert(budget.within_run(snap, nil, 25 * MIN))
    assert.is_nil(plan.timeout_ms)
    assert.equal(5 * MIN, plan.budget_ms) -- the default the executor applies, clamped once here
    assert.is_nil(plan.clip_line)
    plan = assert(budget.within_run(snap, 25 * MIN, nil))
    assert.equal(20 * MIN, plan.timeout_ms) -- clamped, no run bound
  end)

  it("little run left clips a requested budget to what is left minus the reserve, and says so", function()
    local plan = assert(budget.within_run(snap, 20 * MIN, 4 * MIN))
    assert.equal(3 * MIN, plan.timeout_ms)
    assert.matches("^%[timeout clipped to 180s", plan.clip_line)
    assert.truthy(plan.clip_line:find("240s left", 1, true))
    assert.truthy(plan.clip_line:find("60s in reserve", 1, true))
  end)

  it("little run left also clips the 5-minute default the executor would otherwise apply", function()
    local plan = assert(budget.within_run(snap, nil, 3 * MIN))
    assert.equal(2 * MIN, plan.timeout_ms)
    assert.equal(2 * MIN, plan.budget_ms)
    assert.matches("^%[timeout clipped to 120s", plan.clip_line)
  end)

  it("a budget that fits exactly is not clipped", function()
    local plan = assert(budget.within_run(snap, 2 * MIN, 3 * MIN))
    assert.equal(2 * MIN, plan.timeout_ms)
    assert.is_nil(plan.clip_line)
  end)

  it("inside the reserve nothing runs: the refusal's text 'run budget exhausted'", function()
    for _, remaining in ipairs({ 60 * S, 30 * S, 0, -5 * S, 60 * S + 999 }) do
      local plan, why = budget.within_run(snap, 10 * S, remaining)
      assert.is_nil(plan)
      assert.equal("string", type(why))
      assert.matches("^run budget exhausted", why)
    end
    assert.truthy(select(2, budget.within_run(snap, nil, 30 * S)):find("30s of the run left", 1, true))
  end)
end)

describe("send deadlines (item 11)", function()
  local snap
  setup(function() snap = P.shipped() end)

  it("no timeoutMs → 330 s; 20 min → 1230 s; a clamped 25-min ask → 1230 s; file ops → 330 s", function()
    local function deadline(requested) return budget.send_deadline(snap, assert(budget.within_run(snap, requested)).budget_ms) end
    assert.equal(330 * S, deadline(nil))
    assert.equal(1230 * S, deadline(20 * MIN))
    assert.equal(1230 * S, deadline(25 * MIN))
    assert.equal(390 * S, deadline(360000))
    assert.equal(330 * S, budget.file_op_deadline(snap))
  end)

  it("the no-answer error names both numbers", function()
    local m = budget.no_answer_message(snap, "sandbox worker", "/exec", 5 * MIN)
    assert.equal("sandbox worker /exec gave no answer within 330s (command budget 300s + 30s margin) — the sandbox may be gone; the command may still be running in it", m)
  end)
end)

describe("fleet-busy waits (item 14)", function()
  local snap
  setup(function() snap = P.shipped() end)

  local function sum(t)
    local n = 0
    for _, x in ipairs(t) do n = n + x end
    return n
  end

  it("10 s, 20 s, then every 30 s until 5 min for the default budget", function()
    local waits, total = budget.fleet_busy_waits(snap, assert(budget.within_run(snap, nil)).budget_ms)
    assert.same({ 10 * S, 20 * S, 30 * S, 30 * S, 30 * S, 30 * S, 30 * S, 30 * S, 30 * S, 30 * S, 30 * S }, waits)
    assert.equal(5 * MIN, total)
    assert.equal(total, sum(waits))
  end)

  it("never waits longer than 5 min, even for a 20-minute command", function()
    local waits, total = budget.fleet_busy_waits(snap, 20 * MIN)
    assert.equal(5 * MIN, total)
    assert.equal(5 * MIN, sum(waits))
  end)

  it("bounded by the command's own budget, the last wait cut to land on it", function()
    local waits, total = budget.fleet_busy_waits(snap, 45 * S)
    assert.same({ 10 * S, 20 * S, 15 * S }, waits)
    assert.equal(45 * S, total)
    waits = budget.fleet_busy_waits(snap, 5 * S)
    assert.same({ 5 * S }, waits)
  end)

  it("a file op waits the same schedule with the file-op budget", function()
    local _, total = budget.fleet_busy_waits(snap, snap.timeouts.file_op.budget_ms)
    assert.equal(5 * MIN, total)
  end)
end)
