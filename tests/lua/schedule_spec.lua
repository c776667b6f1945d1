-- Scheduled asks: the cron parser (policy/cron.lua), the schema's check, and the scheduler
-- (dispatch/schedule.lua) on a test clock — regular fires, a reload's new schedule, and what a
-- start does about times missed while the bot was down, with the last times in a real record.
local core = require("switchboard.core")
local cron = require("switchboard.policy.cron")
local schedule = require("switchboard.dispatch.schedule")
local record = require("switchboard.store.record")
local P = require("support.policies")

local E = cron.epoch
local function at(s) return os.date("!%Y-%m-%d %H:%M %a", s) end

describe("cron", function()
  it("parses lists, ranges, steps and names, and refuses what cron would", function()
    local s = assert(cron.parse("0 9 * * 1-5"))
    assert.equal("2026-12-07 09:00 Mon", at(cron.next_after(s, E(2026, 12, 5, 10, 0)))) -- a Saturday
    s = assert(cron.parse("*/15 * * * *"))
    assert.equal("2026-12-05 10:15 Sat", at(cron.next_after(s, E(2026, 12, 5, 10, 0))))
    s = assert(cron.parse("30 2,14 1 jan-mar *"))
    assert.equal("2027-01-01 02:30 Fri", at(cron.next_after(s, E(2026, 12, 5, 10, 0))))
    s = assert(cron.parse("0 0 * * sun"))
    assert.equal(cron.next_after(s, E(2026, 12, 5, 0, 0)), cron.next_after(assert(cron.parse("0 0 * * 7")), E(2026, 12, 5, 0, 0)))
    -- both day fields restricted: either matches (the 13th, or a Friday)
    s = assert(cron.parse("0 12 13 * fri"))
    assert.equal("2026-12-11 12:00 Fri", at(cron.next_after(s, E(2026, 12, 5, 0, 0))))
    assert.equal("2026-12-13 12:00 Sun", at(cron.next_after(s, E(2026, 12, 11, 13, 0))))
    assert.equal("2028-02-29 00:00 Tue", at(cron.next_after(assert(cron.parse("0 0 29 2 *")), E(2026, 12, 5, 0, 0))))
    assert.is_nil(cron.next_after(assert(cron.parse("0 0 30 2 *")), E(2026, 12, 5, 0, 0)))
    assert.is_true(cron.matches(assert(cron.parse("5-10/5 * * * *")), E(2026, 12, 5, 3, 10)))
    for _, bad in ipairs({ "* * * *", "60 * * * *", "* 24 * * *", "5-1 * * * *", "*/0 * * * *", "* * * foo *", "1,,2 * * * *" }) do
      local ok, why = cron.parse(bad)
      assert.is_nil(ok, bad)
      assert.is_string(why)
    end
  end)

  it("is checked by the policy schema, with examples in the message", function()
    local snap, errs = P.load(P.dir{ agents = function(src)
      return src .. '\nschedules = { { name = "n", cron = "61 * * * *", agent = "coding", ask = "x", channel = "C1", missed = "skip" },'
        .. ' { name = "m", cron = "0 9 * * 1-5", agent = "nobody", ask = "x", channel = "C1", missed = "later" } }\n'
    end })
    assert.is_nil(snap)
    assert.is_true(P.has(errs, "schedules[1].cron", "minute 61 is outside 0-59", '"0 9 * * 1-5"'), table.concat(errs or {}, "\n"))
    assert.is_true(P.has(errs, "schedules[2].missed"), table.concat(errs or {}, "\n"))
    snap, errs = P.load(P.dir{ agents = function(src)
      return src .. '\nschedules = { { name = "m", cron = "0 9 * * 1-5", agent = "nobody", ask = "x", channel = "C1", missed = "skip" } }\n'
    end })
    assert.is_nil(snap)
    assert.is_true(P.has(errs, "schedules[1].agent", "nobody"), table.concat(errs or {}, "\n"))
    P.cleanup()
    assert.same({}, P.shipped().agents.schedules)
  end)
end)

-- A test clock: now_s() reads it, sleep(ms) moves it on (and yields), as the engine's would.
local function test_clock(start)
  local c = { t = start, naps = {} }
  c.now_s = function() return c.t end
  c.sleep = function(ms, signal)
    if signal and signal.aborted then return false end
    c.naps[#c.naps + 1] = ms
    c.t = c.t + ms // 1000
    core.sleep(0)
    return not (signal and signal.aborted)
  end
  return c
end

local function snap_with(list, max_nap_ms)
  return function()
    return { agents = { schedules = list }, timeouts = { schedules = { max_nap_ms = max_nap_ms or 60000 } } }
  end
end

describe("the scheduler on a test clock", function()
  local dir
  before_each(function() dir = require("support.tmp").dir("schedule") end)
  after_each(function() os.execute("rm -rf '" .. dir .. "'") end)

  it("fires each matching minute once, sleeping until the next one", function()
    core.run(function()
      local clock = test_clock(E(2026, 12, 7, 8, 58) + 30)
      local fired = {}
      local stop = core.signal()
      local s = schedule.new{ policy = snap_with{ { name = "standup", cron = "0 9 * * 1-5", agent = "coding", ask = "a",
                                                     channel = "C1", missed = "skip" } },
        now_s = clock.now_s, sleep = clock.sleep, log = function() end,
        fire = function(e, t) fired[#fired + 1] = e.name .. "@" .. at(t); if #fired == 2 then stop:abort("done") end end }
      s:start(stop)
      while not stop.aborted do core.sleep(1) end
      assert.same({ "standup@2026-12-07 09:00 Mon", "standup@2026-12-08 09:00 Tue" }, fired)
      -- it slept up to each time (at most a minute at once: a reload's schedules are seen), never past one
      for _, ms in ipairs(clock.naps) do assert.is_true(ms >= 1000 and ms <= 60000, ms .. " ms") end
      assert.equal(E(2026, 12, 8, 9, 0), clock.t)
    end)
  end)

  it("naps at most policies/timeouts.lua schedules.max_nap_ms, read at each nap (a reload applies)", function()
    local clock = test_clock(E(2026, 12, 7, 8, 0))
    local nap_ms = 60000
    local list = { { name = "nightly", cron = "0 3 * * *", agent = "coding", ask = "a", channel = "C1", missed = "skip" } }
    local s = schedule.new{ policy = function() return snap_with(list, nap_ms)() end, now_s = clock.now_s,
      sleep = clock.sleep, log = function() end, fire = function() end }
    assert.equal(60, s:nap()) -- the shipped bound: 19 h to 03:00, a minute at once
    nap_ms = 10000
    assert.equal(10, s:nap())
    clock.t = E(2026, 12, 8, 2, 59) + 57
    assert.equal(3, s:nap()) -- the fire time nearer than the bound
  end)

  it("after downtime: run_once fires one missed run at start, skip fires none; the record keeps the last times", function()
    core.run(function()
      local rec = assert(record.open(dir .. "/record.db"))
      local list = {
        { name = "hourly-a", cron = "0 * * * *", agent = "coding", ask = "a", channel = "C1", missed = "run_once" },
        { name = "hourly-b", cron = "0 * * * *", agent = "coding", ask = "b", channel = "C1", missed = "skip" },
      }
      local t0 = E(2026, 12, 5, 10, 30)
      local fired = {}
      local function fire(e, t) fired[#fired + 1] = e.name .. "@" .. at(t) end
      -- the first process: never fired before, so nothing is missed; it fires at 11:00
      local c1 = test_clock(t0)
      local s1 = schedule.new{ policy = snap_with(list), record = rec, now_s = c1.now_s, sleep = c1.sleep, fire = fire, log = function() end }
      s1:tick()
      assert.same({}, fired)
      c1.t = E(2026, 12, 5, 11, 0)
      s1:tick()
      assert.same({ "hourly-a@2026-12-05 11:00 Sat", "hourly-b@2026-12-05 11:00 Sat" }, fired)
      -- down from 11:01 to 14:20: 12:00, 13:00 and 14:00 were missed
      fired = {}
      local c2 = test_clock(E(2026, 12, 5, 14, 20))
      local s2 = schedule.new{ policy = snap_with(list), record = rec, now_s = c2.now_s, sleep = c2.sleep, fire = fire, log = function() end }
      s2:tick()
      assert.same({ "hourly-a@2026-12-05 14:00 Sat" }, fired)
      -- a second process on the same record at the same time fires nothing again
      local s3 = schedule.new{ policy = snap_with(list), record = rec, now_s = c2.now_s, sleep = c2.sleep, fire = fire, log = function() end }
      s3:tick()
      assert.same({ "hourly-a@2026-12-05 14:00 Sat" }, fired)
      -- both are on time for 15:00
      c2.t = E(2026, 12, 5, 15, 0)
      s2:tick()
      assert.same({ "hourly-a@2026-12-05 14:00 Sat", "hourly-a@2026-12-05 15:00 Sat", "hourly-b@2026-12-05 15:00 Sat" }, fired)
      assert.equal(E(2026, 12, 5, 15, 0), rec:schedule_last("hourly-b"))
      -- a running process whose host slept past three times fires each schedule once, the newest
      fired = {}
      c2.t = E(2026, 12, 5, 18, 30)
      s2:tick()
      assert.same({ "hourly-a@2026-12-05 18:00 Sat", "hourly-b@2026-12-05 18:00 Sat" }, fired)
      rec:close()
    end)
  end)
end)
