-- The workspace image templates (src/walls/disk.c: ".workspace-template-<bytes>.img" in the
-- workspaces' root, one per size, copied into each new image): a size no longer in use is
-- removed at sandboxd's start and after a policy reload (shell/workspace.lua sweep_templates),
-- the size in use kept; at start a killed maker's half-made ".new" is removed too. A real walled
-- sandboxd makes the template it uses (its spare instance's image is copied from it).
local core = require("switchboard.core")
local S = require("support.sandbox")
local policies = require("support.policies")

local UID_BASE = require("support.walls").private_uid_base(64)
local MIB = 1024 * 1024

local function policy_dir()
  return policies.dir{
    timeouts = function(src) return src .. "\n" .. S.FAST .. "\n" end,
    isolation = function(src)
      -- small workspaces: the spare instance holds its whole image of the host's disk
      return src .. ("\nuid_base = %d\nuid_count = 64\nworkspace_max_bytes = 64 * MiB\n"):format(UID_BASE)
    end,
  }
end

local describe_walls = require("support.walls").probe(policy_dir(), { describe = describe, it = it, pending = pending })

after_each(S.cleanup_servers)
teardown(S.cleanup)

local function template(bytes) return (".workspace-template-%d.img"):format(bytes) end

local function templates(root)
  local out = {}
  for _, name in ipairs(core.fs.list(root) or {}) do
    if name:match("^%.workspace%-template%-") then out[#out + 1] = name end
  end
  table.sort(out)
  return out
end

describe_walls("workspace image templates", function()
  it("of a size no longer in use are removed at start and after a reload; the one in use is kept", function()
    core.run(function()
      local dir = policy_dir()
      local root = core.fs.realpath(S.tmpdir())
      -- what an earlier run with other sizes left: two templates and a killed maker's half
      for _, name in ipairs({ template(32 * MIB), template(2048 * MIB), template(16 * MIB) .. ".new" }) do
        assert(core.fs.write_file(root .. "/" .. name, "not an image"))
      end
      local h = S.start_sandboxd{ policies = dir, root = root }
      -- the spare instance's image is copied from the template of the size in use
      assert(S.wait_for(function() return #templates(root) == 1 end, 60000), table.concat(templates(root), " "))
      assert.same({ template(64 * MIB) }, templates(root))
      local swept = h.log():match("sandboxd%.templates_swept[^\n]*")
      assert.truthy(swept and swept:find(template(32 * MIB), 1, true) and swept:find(template(2048 * MIB), 1, true)
        and swept:find(template(16 * MIB) .. ".new", 1, true), h.log())

      -- a reload to another size: the 64 MiB template is no longer in use
      local f = assert(io.open(dir .. "/isolation.lua", "a"))
      f:write("\nworkspace_max_bytes = 48 * MiB\n")
      f:close()
      h:stop("HUP")
      assert(S.wait_for(function() return h.log():find("sandboxd%.reload [^\n]*ok=true") end, 60000), h.log())
      assert(S.wait_for(function() return #templates(root) == 0 end, 60000), table.concat(templates(root), " "))
      -- a new thread's instance makes the new size's (the spare, of the old size, is taken first;
      -- its replacement is built on the new snapshot)
      local status, _, raw = S.call(h.url, "/exec", { thread = "T-1", body = { command = "echo ran" }, deadline_ms = 120000 })
      assert.equal(200, status)
      assert.truthy(tostring(raw):find('"ran\\n"', 1, true), raw)
      assert(S.wait_for(function() return templates(root)[1] == template(48 * MIB) end, 60000),
        table.concat(core.fs.list(root) or {}, " ") .. "\n" .. h.log())
      h:stop(); h:wait()
    end)
  end)
end)
