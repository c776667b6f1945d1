-- A walled command's HOME (policies/isolation.lua home, docs/isolation.md "HOME"): a directory
-- of the instance's private /tmp that its uid can write, never the server's HOME (/root, /home
-- are not in an instance's view) and never under the workspace, whose files publish commits.
-- Real walled sandboxd: the thread's first command runs on the Lua path, a later one on the exec
-- lane (its metric says so); both write under $HOME (a cache directory, `git config --global`),
-- and a request's own HOME still wins. The local executor's walls (`switchboard exec` with
-- local_walls = true) and the resident's walled threads give the same HOME; unwalled, a command
-- keeps the host's.
local cjson = require("cjson")
local core = require("switchboard.core")
local S = require("support.sandbox")
local policies = require("support.policies")
local bin = require("support.bin")

local UID_BASE = require("support.walls").private_uid_base(64)

local function policy_dir()
  return policies.dir{
    timeouts = function(src) return src .. "\n" .. S.FAST .. '\nsandbox.sleep_after = "10m"\n' end,
    isolation = function(src) return src .. "\nworkspace_max_bytes = 32 * MiB\nspare_instances = 0\n" end,
  }
end

local describe_walls = require("support.walls").probe(policy_dir(), { describe = describe, it = it, pending = pending })

after_each(S.cleanup_servers)
teardown(S.cleanup)

local function exec(h, body)
  local status, _, raw = S.call(h.url, "/exec", { thread = "T-home", deadline_ms = 120000, body = body })
  assert.equal(200, status, raw)
  return cjson.decode(raw), raw
end

local function lane_answered(h)
  return S.metric(h, 'switchboard_exec_lane_total{outcome="answered"}') or 0
end

-- What a tool that keeps state under $HOME does, and where HOME is beside the workspace.
local WRITE_HOME = 'echo "HOME=$HOME"; echo "PWD=$(pwd -P)"; '
  .. 'mkdir -p "$HOME/.cache/x" && git config --global user.name x && git config --global user.name'

local function check(doc, raw, where)
  assert.equal(0, doc.exitCode, where .. ": " .. raw)
  local home = doc.stdout:match("HOME=([^\n]*)\n")
  local pwd = doc.stdout:match("PWD=([^\n]*)\n")
  assert.equal("/tmp/home", home, where .. ": " .. doc.stdout)
  assert.equal("/workspace", pwd, where)
  assert.falsy((home .. "/"):find(pwd .. "/", 1, true), where .. ": HOME is under the workspace")
  assert.truthy(doc.stdout:find("\nx\n$"), where .. ": " .. doc.stdout)
end

describe_walls("a walled command's HOME", function()
  it("is a directory of the instance's it can write, outside the workspace, on the Lua path and the lane", function()
    core.run(function()
      local h = S.start_sandboxd{ policies = policy_dir() }
      local before = lane_answered(h)
      -- the thread's first command makes the instance: Lua's path
      local doc, raw = exec(h, { command = WRITE_HOME })
      check(doc, raw, "Lua path")
      assert.equal(before, lane_answered(h), "the first command was not Lua's")
      -- the instance is armed by now: a later command is the lane's, in a fresh HOME state
      doc, raw = exec(h, { command = "rm -rf \"$HOME/.cache\" \"$HOME/.gitconfig\"; " .. WRITE_HOME })
      check(doc, raw, "lane")
      assert.equal(before + 1, lane_answered(h), "the later command was not the lane's")
      -- nothing of it in the workspace, whose files publish would commit
      doc, raw = exec(h, { command = "ls -A /workspace; stat -c '%a %u' \"$HOME\"; id -u" })
      assert.equal(0, doc.exitCode, raw)
      assert.falsy(doc.stdout:find(".gitconfig", 1, true), doc.stdout)
      assert.falsy(doc.stdout:find(".cache", 1, true), doc.stdout)
      local mode, owner, uid = doc.stdout:match("(%d+) (%d+)\n(%d+)\n$")
      assert.equal("700", mode, doc.stdout)
      assert.equal(uid, owner, doc.stdout)
      -- a request's own HOME wins
      doc, raw = exec(h, { command = 'echo "$HOME"', env = { HOME = "/workspace/mine" } })
      assert.equal(0, doc.exitCode, raw)
      assert.equal("/workspace/mine\n", doc.stdout)
      h:stop(); h:wait()
    end)
  end)
end)

describe_walls("the local executor's HOME", function()
  it("is the instance's behind walls (local_walls = true), the host's unwalled", function()
    core.run(function()
      local root = S.tmpdir()
      local function run(isolation_extra, command)
        local pol = policies.dir{
          timeouts = function(src) return src .. "\n" .. S.FAST .. "\n" end,
          isolation = function(src)
            return src .. ("\nuid_base = %d\nuid_count = 64\nspare_instances = 0\nworkspace_max_bytes = 32 * MiB\n")
              :format(UID_BASE) .. isolation_extra
          end,
        }
        return bin.run({ "--policies", pol, "exec", "--workspace-root", root, "--thread", "H1", "--", command })
      end
      local r = run("local_walls = true\n", WRITE_HOME)
      assert.equal(0, r.exit, r.stdout .. r.stderr)
      assert.truthy(r.stderr:find("local executor: walled", 1, true), r.stderr)
      check({ exitCode = 0, stdout = r.stdout }, r.stdout .. r.stderr, "local walled")
      r = run("", 'echo "HOME=$HOME"')
      assert.equal(0, r.exit, r.stdout .. r.stderr)
      assert.truthy(r.stderr:find("local executor: unwalled", 1, true), r.stderr)
      assert.equal("HOME=" .. tostring(os.getenv("HOME")) .. "\n", r.stdout)
      S.rm(root)
    end)
  end)
end)

describe("the resident's walled threads' HOME", function()
  it("is the instance's, outside the thread's worktree", function()
    core.run(function()
      local R = require("support.resident")
      local base = R.make_base()
      local h = R.start_walled(base, { policies = R.policy_dir() }, pending)
      if not h then return end
      assert.equal("warm", R.onboard(h, "acme/api"))
      local function call(path, body)
        local status, _, raw = core.http.request{ method = "POST", url = h.url .. path,
          headers = { authorization = "Bearer " .. R.TOKEN, ["x-thread-key"] = "R-home", ["content-type"] = "application/json" },
          body = cjson.encode(body), deadline_ms = 300000 }
        assert.equal(200, status, raw)
        return cjson.decode(raw), raw
      end
      call("/attach", { repo = "acme/api" })
      local status_now = "git status --porcelain --ignored | wc -l"
      local doc, raw = call("/exec", { command = "echo \"before=$(" .. status_now .. ")\"; " .. WRITE_HOME
        .. '; echo "after=$(' .. status_now .. ')"' })
      assert.equal(0, doc.exitCode, raw)
      assert.equal("/tmp/home", doc.stdout:match("HOME=([^\n]*)\n"), raw)
      local pwd = doc.stdout:match("PWD=([^\n]*)\n")
      assert.falsy(("/tmp/home/"):find(pwd .. "/", 1, true), raw)
      assert.truthy(doc.stdout:find("\nx\n", 1, true), raw)
      -- nothing new in the repository publish would commit
      assert.equal(doc.stdout:match("before=(%d+)"), doc.stdout:match("after=(%d+)"), raw)
      h.stop(); h.wait()
      S.rm(base)
    end)
  end)
end)
