-- Black-box (docs/slack.md "Restarts without a deaf window"): `switchboard slack` restarted
-- three times while mentions keep coming, each new process connected before the old one is
-- told to stop (tests/support/restarts.lua). Every mention runs exactly once: none is lost in
-- the old process's stop (what it acked runs; what it did not ack Slack sends again, to the new
-- connection), none runs twice (the seen event ids are in the record both processes share).
-- bench/slack_restart_bench.lua runs the same with 100 mentions.
local async = require("support.async")
local tmp = require("support.tmp")
local restarts = require("support.restarts")

describe("restarts with the next process connected first", function()
  after_each(function() tmp.remove_all() end)

  it("lose no mention and run none twice", async(function()
    local r = restarts.run{ mentions = 40, restarts = 3, burst = 8, every_ms = 40, lose_every = 7,
                            state_dir = tmp.dir("slack-restart") }
    print(("slack_restart_spec: %d mentions, %d restarts: %d lost, %d run twice; %d acks lost, %d sent again by Slack "
      .. "(%d found seen), %d given up"):format(r.mentions, r.restarts, #r.lost, #r.twice, r.acks_lost, r.redelivered,
      r.duplicates, r.given_up))
    local logs = table.concat(r.logs, "\n====\n")
    assert.is_nil(r.error, tostring(r.error) .. "\nlost: " .. table.concat(r.lost, ",") .. "\ntwice: " .. table.concat(r.twice, ","))
    assert.same({}, r.lost, "mentions without a card")
    assert.same({}, r.twice, "mentions with more than one card")
    for i, n in ipairs(r.runs) do assert.equals(1, n, "mention " .. i .. " asked " .. n .. " times\n" .. logs) end
    assert.equals(0, r.given_up)
    assert.is_true(r.acks_lost > 0 and r.redelivered > 0 and r.duplicates > 0, "Slack sent nothing again, or nothing was found seen")
    assert.same({ 0, 0, 0, 0 }, r.exits)
  end))
end)
