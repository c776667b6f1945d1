-- The walls attacks (tests/lua/support/walls.lua, the same ones tests/e2e/walls_spec.lua runs on
-- the host) against sandboxd inside the sandbox image, started walled as the manifests start it.
-- Run by deploy/tests/image_smoke.sh, which starts the container and passes:
--   SB_IMAGE_URL   the container's published sandboxd
--   SANDBOX_TOKEN  its bearer
--   SB_IMAGE_PID   sandboxd's pid in the container's PID namespace (what a command would aim at)
--   SB_IMAGE_ROOT  its --root when not the image's /var/lib/sandboxd (deploy/tests/package_systemd.sh)
local core = require("switchboard.core")
local cjson = require("cjson")
local walls = require("support.walls")

local URL, TOKEN = os.getenv("SB_IMAGE_URL"), os.getenv("SANDBOX_TOKEN")

local function exec(thread, command, extra)
  local body = { command = command }
  for k, v in pairs(extra or {}) do body[k] = v end
  local status, _, raw = core.http.request{ method = "POST", url = URL .. "/exec", deadline_ms = 120000,
    headers = { authorization = "Bearer " .. TOKEN, ["x-thread-key"] = "image-" .. thread,
      ["content-type"] = "application/json" }, body = cjson.encode(body) }
  assert.equal(200, status, raw)
  return cjson.decode(raw)
end

local ctx = {
  token = TOKEN, pid = tonumber(os.getenv("SB_IMAGE_PID")), root = os.getenv("SB_IMAGE_ROOT") or "/var/lib/sandboxd",
  -- the shipped policies/isolation.lua pids_max: the image's own settings
  pids_max = tonumber(io.open("policies/isolation.lua"):read("a"):match("\npids_max = (%d+)")),
  healthz = function()
    return (core.http.request{ method = "GET", url = URL .. "/healthz", deadline_ms = 15000,
      headers = { authorization = "Bearer " .. TOKEN } })
  end,
}

describe("the sandbox image, walled: a command inside", function()
  assert(URL and TOKEN and ctx.pid, "run by deploy/tests/image_smoke.sh (SB_IMAGE_URL, SANDBOX_TOKEN, SB_IMAGE_PID)")
  it("cannot read sandboxd's environment or memory, nor signal it; sees only its own processes", function()
    core.run(function() walls.attacks.server(exec, ctx) end)
  end)
  it("sees no other workspace, no server root and no secret files; its own work succeeds", function()
    core.run(function() walls.attacks.neighbours(exec, ctx) end)
  end)
  it("cannot read another thread's GH_TOKEN from /proc", function()
    core.run(function() walls.attacks.gh_token(exec, ctx) end)
  end)
  -- The container's own capability list (podman's --cap-add, the manifests' add:) must be enough
  -- to heal an instance that killed every process in it: a workspace's file system remounted for
  -- the next instance was chmod'ed as the dead instance's uid owned it (CAP_FOWNER, in no list).
  it("after `kill -9 -1` the thread's next command runs in a fresh instance on the same files", function()
    core.run(function()
      assert.equal(0, exec("heal", "echo kept > kept.txt").exitCode)
      assert.are_not.equal(0, exec("heal", "kill -9 -1; sleep 5").exitCode)
      -- (a request racing the instance's last moments may meet it dying, and is told so: the
      -- next ones must work — before, every later one failed)
      local r
      for _ = 1, 30 do
        r = exec("heal", "cat kept.txt")
        if r.exitCode == 0 then break end
        core.sleep(1000)
      end
      assert.equal(0, r.exitCode, cjson.encode(r))
      assert.equal("kept\n", r.stdout)
    end)
  end)
  it("a fork bomb stops at the instance's own process limit (its cgroup in the delegated subtree)", function()
    core.run(function() walls.attacks.fork_bomb(exec, ctx) end)
  end)
end)
