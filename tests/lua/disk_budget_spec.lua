-- sandboxd's disk budget (lua/switchboard/sandboxd/disk_budget.lua): the fleet's workspace
-- images against the host's free disk, said at start (docs/isolation.md "The host's disk").
-- The black-box case (a 1 GiB root, its start line) is tests/e2e/walls_disk_spec.lua.
local disk_budget = require("switchboard.sandboxd.disk_budget")

local MiB, GiB = 1024 * 1024, 1024 * 1024 * 1024

describe("sandboxd disk budget", function()
  local iso = { workspace_max_bytes = 2 * GiB, disk_reserve_bytes = 2 * GiB, workspace_size = "filesystem" }

  it("counts the workspaces that fit beside the reserve", function()
    assert.equal(38, disk_budget.fit(78 * GiB, 2 * GiB, 2 * GiB))
    assert.equal(0, disk_budget.fit(GiB, 2 * GiB, 2 * GiB))
    assert.equal(1, disk_budget.fit(960 * MiB, 700 * MiB, 64 * MiB))
  end)

  it("says nothing when the fleet fits, and the numbers and the settings when it does not", function()
    assert.is_nil(disk_budget.problem(iso, 26, { size = 250 * GiB, avail = 80 * GiB }))
    -- the issue's host: 20 GiB × 25 instances (+ 1 spare) promised on 77 GiB free
    local big = { workspace_max_bytes = 20 * GiB, disk_reserve_bytes = 2 * GiB }
    local why = disk_budget.problem(big, 26, { size = 250 * GiB, avail = 77 * GiB })
    assert.truthy(why, "a fleet of 522 GiB on 77 GiB free fits?")
    assert.truthy(why:find("522 GiB (26 × 20 GiB, workspace_max_bytes, plus disk_reserve_bytes 2 GiB)", 1, true), why)
    assert.truthy(why:find("77 GiB free of 250 GiB: 3 of them fit", 1, true), why)
  end)

  it("logs the warning, or the fit, from --root's real file system (df)", function()
    local core = require("switchboard.core")
    local lines = {}
    local log = function(level, event, fields) lines[#lines + 1] = { level = level, event = event, fields = fields } end
    core.run(function()
      local room = disk_budget.check{ root = "/", max_instances = 25, spares = 1, isolation = iso,
        deadline_ms = 30000, log = log }
      assert.truthy(room and room.size > 0 and room.avail >= 0)
      -- a fleet no disk holds: 1,000,000 workspaces of 1 TiB
      disk_budget.check{ root = "/", max_instances = 1000000, isolation = { workspace_max_bytes = 1024 * GiB,
        disk_reserve_bytes = 0, workspace_size = "filesystem" }, deadline_ms = 30000, log = log }
      -- measured: no image, nothing to check
      assert.is_nil(disk_budget.check{ root = "/", max_instances = 25, isolation = { workspace_size = "measured" },
        deadline_ms = 30000, log = log })
    end)
    assert.equal(2, #lines)
    assert.equal("sandboxd.disk_short", lines[2].event)
    assert.equal("warn", lines[2].level)
    assert.equal(0, lines[2].fields.workspaces_that_fit)
  end)
end)
