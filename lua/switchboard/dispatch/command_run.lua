-- A command ask (`run `make test``) as a kind of run: the dispatcher's lifecycle
-- (dispatch/dispatcher.lua: provision → stop re-check → run → release) calls these. The
-- command runs once under the ask's hard-stop signal and the run's remaining wall clock (the
-- agent's max_run_minutes); its card ends with the result or the executor's error.
--
--   command_run.run(ctx, run)          the command, in the thread's worker task
--   command_run.raised(ctx, run, why)  the run raised (a bug; logged by the lifecycle): the card's error
--   command_run.ended(ctx, run)        after the release: what the card says about it
-- run: {thread, ask, built, deadline_ms, released = "stopped" | "tripped" | nil}; ctx: the run's narrow
-- context (dispatch/dispatcher.lua run_context): a command needs only its clock, ctx.now_ms
local core = require("switchboard.core")
local errors = require("switchboard.exec.errors")

local M = {}

function M.run(ctx, run)
  local ask, c = run.ask, run.ask.card
  core.log("info", "dispatch.run", { thread = run.thread.name, agent = ask.agent, backend = run.built.backend, ask = ask.id })
  local result, err = run.built.executor:exec(ask.command, {
    signal = ask.stop, remaining_ms = run.deadline_ms - ctx.now_ms(), snap = ask.snap,
  })
  if result then c:finished(result, ctx.now_ms()) else c:failed(err, ctx.now_ms(), errors) end
end

-- An executor that raises ends the ask as an infra failure; the thread goes on.
function M.raised(ctx, run, why)
  run.ask.card:failed(errors.infra("the executor raised: " .. why), ctx.now_ms(), errors)
end

function M.ended(_, run)
  local ask, c = run.ask, run.ask.card
  if run.released == "stopped" then
    if c.state ~= "stopped" then c:add_note("stopped: " .. tostring(ask.stop.reason)) end
  elseif run.released == "tripped" then
    c:add_note(("the executor failed %d times in a row; the next ask provisions a fresh one")
      :format(run.built.tracker.count))
  end
  core.log("info", "dispatch.done", {
    thread = run.thread.name, agent = ask.agent, backend = run.built.backend, ask = ask.id,
    state = c.state, exit = c.exit_code,
  })
end

return M
