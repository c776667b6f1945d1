-- Black-box (docs/schedules.md): a policy's scheduled ask fires in the real `switchboard slack`
-- against the Slack stand-in — its card in a new thread of the schedule's channel — and a start
-- after downtime does what each schedule's `missed` says: run_once fires the missed run at once,
-- skip fires nothing, a schedule never fired before waits for its next time. The last fire
-- times are in the thread's record (record.db in the state directory), seeded here as a
-- previous process would have left them two hours ago: the spec's time is the bot's start, not
-- the next full hour.
local async = require("support.async")
local tmp = require("support.tmp")
local P = require("support.policies")
local SL = require("support.slack")
local record = require("switchboard.store.record")
local core = require("switchboard.core")

local function schedule(name, channel, missed)
  return ('{ name = "%s", cron = "0 * * * *", agent = "coding", ask = "run `printf ran-%%s %s`", channel = "%s", missed = "%s" }')
    :format(name, name, channel, missed)
end

local function roots(st, channel)
  local out = {}
  for ts, m in pairs(st:state().messages) do
    if m.channel == channel and (m.thread_ts == nil or m.thread_ts == require("cjson").null) then
      m.ts = ts
      out[#out + 1] = m
    end
  end
  return out
end

describe("scheduled asks", function()
  local st, bot, state_dir

  before_each(async(function()
    state_dir = tmp.dir("slack-schedule")
    st = SL.standin()
  end))

  after_each(async(function()
    SL.kill_bot(bot)
    bot = nil
    st:close()
    tmp.remove_all()
    P.cleanup()
  end))

  it("after downtime: run_once posts the missed run's card in a new thread of its channel, skip and a new schedule post nothing", async(function()
    core.fs.mkdir_p(state_dir, tonumber("700", 8))
    local rec = assert(record.open(state_dir .. "/record.db"))
    local before = core.wall_ms() // 1000 - 7200
    assert.is_true(rec:schedule_claim("catch-up", before))
    assert.is_true(rec:schedule_claim("skipped", before))
    rec:close()
    local pol = P.dir{ agents = function(src)
      return src .. "\nschedules = { " .. schedule("catch-up", "C0SCHED", "run_once") .. ", "
        .. schedule("skipped", "C0SKIP", "skip") .. ", " .. schedule("fresh", "C0FRESH", "run_once") .. " }\n"
    end }
    bot = SL.bot(st, { state_dir = state_dir, policies = pol })
    local root = SL.wait(function() return roots(st, "C0SCHED")[1] end, "the scheduled thread's first message")
    assert.matches("Scheduled ask `catch-up` (0 * * * *, ", root.text, 1, true)
    local card = SL.wait(function()
      local c = st:cards(root.ts)[1]
      return c and SL.is_final(c) and c
    end, "the scheduled run's final card in its thread")
    assert.matches("ran-catch-up", SL.card_text(card), 1, true) -- its output: the command ran
    SL.wait(function() return bot.err:find('schedule.missed[^\n]*schedule=skipped') end, "the skipped schedule looked at")
    bot:signal("TERM")
    assert.equals(0, bot:wait().exit, bot.err)
    assert.equals(1, #roots(st, "C0SCHED"))
    assert.equals(0, #roots(st, "C0SKIP"))
    assert.equals(0, #roots(st, "C0FRESH"))
    assert.equals(1, select(2, bot.err:gsub("schedule%.fire ", "")))
    -- what the next start compares with: every schedule's last time is at most an hour old
    rec = assert(record.open(state_dir .. "/record.db"))
    local now = core.wall_ms() // 1000
    for _, name in ipairs({ "catch-up", "skipped", "fresh" }) do
      local last = rec:schedule_last(name)
      assert.is_true(last and now - last <= 3600, name .. ": " .. tostring(last))
    end
    rec:close()
  end))
end)
