-- The executor a front hands its tools: the factory's choice, wrapped in the health tracker
-- (fail-fast's seam) and, outermost, the tracing decorator (one exec.* span per operation).
local factory = require("switchboard.exec.factory")
local health = require("switchboard.exec.health")
local tracing = require("switchboard.exec.tracing")
local resident = require("switchboard.exec.resident")

local M = {}

local function discard() end

-- `repo onboard OWNER/REPO` from a front: the backend that keeps repositories warm (the
-- resident) onboards it; returns the text the thread gets.
function M.onboard(opts, snap, repo)
  return resident.onboard_text(snap, opts.getenv or os.getenv, repo, opts.resident_url)
end

-- opts: the factory's opts plus sink (a tracing sink; spans are dropped without one) and
--       unwalled_note (a line added to every card whose local executor runs unwalled)
-- ctx:  the factory's ctx (ctx.snap: the snapshot the ask captured)
-- Returns {executor (traced), tracker, backend, note (the factory's), notes (every line the card
-- shows under its header: the factory's note, then the local executor's walls line),
-- take_notes (→ the lines a backend said during the ask, once: a workspace it could not keep)}
-- or nil, err.
function M.build(opts, ctx)
  local snap = ctx.snap or opts.policy()
  local fctx = { snap = snap }
  for k, v in pairs(ctx) do fctx[k] = fctx[k] or v end
  local selection, err = factory.make_executor(opts, fctx)
  if not selection then return nil, err end
  local tracker = health.new(selection.executor, snap)
  -- The card says whether the local executor walls its commands (docs/isolation.md): the
  -- console's default runs them as the operator, on the operator's host.
  local notes = { selection.note }
  local walls_note = selection.executor.walls_note
  if walls_note then notes[#notes + 1] = walls_note(selection.executor) end
  -- A front that serves other people started with --allow-unwalled-commands marks every card
  -- whose commands run unwalled (docs/isolation.md "Fronts that serve other people").
  if opts.unwalled_note and walls_note and not selection.executor.walls then
    notes[#notes + 1] = opts.unwalled_note
  end
  return {
    executor = tracing.new(tracker, { sink = opts.sink or discard, backend = selection.backend }),
    tracker = tracker,
    backend = selection.backend,
    note = selection.note,
    notes = notes,
    take_notes = function()
      local take = selection.executor.take_notes
      return take and take(selection.executor) or {}
    end,
  }
end

return M
