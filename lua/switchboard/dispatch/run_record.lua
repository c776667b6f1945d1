-- The record's side of an agent run (store/record.lua), as a subscriber of the run's events
-- (dispatch/run_events.lua): the run's row when it starts (and the run page's address, which
-- the card shows), every kept event as the row's events (the run page reads them), the cost
-- after each kept turn (a run the bot dies in still counts towards the caps after a restart),
-- the thread's repository, branch and pull request, and the row's end.
--
--   stream:subscribe("record", run_record.follow{record, remember, thread, ask, backend,
--                                                 instance, page_url?, emit})
--   remember(what, fn, ...): a write whose failure is logged, never raised (the dispatcher's)
--   emit(event): the stream's, for the page's address
local core = require("switchboard.core")
local run_events = require("switchboard.dispatch.run_events")

local M = {}

function M.follow(o)
  local rec, ask, rrun, published, publish_problem = o.record, o.ask, nil, nil, nil
  local function bind(fields) o.remember("thread", rec.bind, o.thread, fields) end
  local on = {}
  function on.started()
    rrun = o.remember("run_start", rec.run_start, { thread = o.thread, ask = ask.text, agent = ask.agent,
      model = ask.agent_def.model, user = ask.user, backend = o.backend })
    if not rrun then return end
    -- the thread's backend, and the key its sandbox or resident instance is bound by
    bind{ backend = o.backend, instance = o.instance }
    local url = o.page_url and o.page_url(rrun.token)
    if url then o.emit{ type = "page", url = url } end -- a View run button (Slack), a line (the console)
  end
  function on.phase(e)
    if e.state == "running" and e.repo then bind{ repo = e.repo, backend = o.backend } end
  end
  function on.publish(e)
    if e.state == "published" then
      published = e.pull_request
      bind{ branch = e.branch, pr_number = e.pull_request.number, pr_url = e.pull_request.url }
    elseif e.state == "failed" then
      publish_problem = e.problem
    end
  end
  function on.saved(e)
    if rrun and e.cost_usd then core.go(function() o.remember("run_cost", rec.run_cost, rrun, e.cost_usd) end) end
  end
  function on.run_end(e)
    if not rrun then return end
    o.remember("run_end", rec.run_end, rrun, { outcome = e.state, turns = e.turns, tokens_in = e.tokens_in,
      tokens_out = e.tokens_out, cost = e.cost_usd, answer = e.answer, problem = e.problem or publish_problem,
      pr_url = published and published.url })
  end
  return function(e)
    -- events are not waited for (the FIFO keeps their order, and the conversation's save after
    -- each turn, which is waited for, commits after them): the run does not pay two more
    -- thread-pool round trips per turn
    if rrun and run_events.kept(e) then
      core.go(function() o.remember("event", rec.event, rrun, e) end)
    end
    if on[e.type] then on[e.type](e) end
  end
end

return M
