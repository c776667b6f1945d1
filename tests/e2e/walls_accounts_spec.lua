-- A walled command's accounts (shell/child_env.lua walled_accounts, switchboard-walls hold
-- --passwd --group): the instance's /etc/passwd and /etc/group name root, its own uid 1000
-- under policies/isolation.lua user_name (HOME the walled HOME) and nobody — not the host's
-- accounts, whose name for uid 1000 `id -un` used to answer. What the command otherwise sees
-- stays: the policy's environment, LANG's locale, a read-only /etc.
local core = require("switchboard.core")
local cjson = require("cjson")
local S = require("support.sandbox")
local policies = require("support.policies")

local UID_BASE = require("support.walls").private_uid_base(64)

local function policy_dir(isolation_extra)
  return policies.dir{
    timeouts = function(src) return src .. "\n" .. S.FAST .. "\n" end,
    isolation = function(src)
      return src .. ("\nuid_base = %d\nuid_count = 64\nspare_instances = 0\nworkspace_max_bytes = 32 * MiB\n%s\n")
        :format(UID_BASE, isolation_extra or "")
    end,
  }
end

local describe_walls = require("support.walls").probe(policy_dir(), { describe = describe, it = it, pending = pending })

after_each(S.cleanup_servers)
teardown(S.cleanup)

local function exec(h, command)
  local status, _, raw = S.call(h.url, "/exec", { thread = "T-accounts", body = { command = command }, deadline_ms = 120000 })
  assert.equal(200, status, raw)
  local doc = cjson.decode(raw)
  assert.equal(0, doc.exitCode, raw)
  return doc.stdout
end

-- the lines of a text, as a list
local function lines(text)
  local out = {}
  for line in text:gmatch("[^\n]+") do out[#out + 1] = line end
  return out
end

describe_walls("a walled command's accounts", function()
  it("are the instance's own: its user under the policy's name, root and nobody, none of the host's", function()
    core.run(function()
      local h = S.start_sandboxd{ policies = policy_dir() } -- LANG=C.UTF-8 (support/sandbox.lua)
      assert.equal("sandbox\n", exec(h, "id -un"))
      assert.equal("uid=1000(sandbox) gid=1000(sandbox) groups=1000(sandbox)\n", exec(h, "id"))
      assert.same({
        "root:x:0:0:root:/root:/usr/sbin/nologin",
        "sandbox:x:1000:1000:sandbox:/tmp/home:/bin/bash",
        "nobody:x:65534:65534:nobody:/nonexistent:/usr/sbin/nologin",
      }, lines(exec(h, "getent passwd")))
      assert.same({ "root:x:0:", "sandbox:x:1000:", "nogroup:x:65534:" }, lines(exec(h, "getent group")))
      -- a file the command makes is its user's, by name; the account files read like the host's
      assert.equal("sandbox sandbox\n", exec(h, "touch f && stat -c '%U %G' f"))
      assert.equal("644\n644\n", exec(h, "stat -c %a /etc/passwd /etc/group"))
      -- read-only, like the rest of /etc
      assert.equal("read-only\n", exec(h, "if echo x >> /etc/passwd 2>/dev/null; then echo writable; else echo read-only; fi"))
      h:stop(); h:wait()
    end)
  end)

  it("leave the rest as it was: the policy's environment, LANG's locale, the host's other /etc files", function()
    core.run(function()
      local h = S.start_sandboxd{ policies = policy_dir() }
      local env = {}
      for name, value in exec(h, "env"):gmatch("([%w_]+)=([^\n]*)") do env[name] = value end
      assert.equal("C.UTF-8", env.LANG)
      assert.equal("/tmp/home", env.HOME)
      assert.equal(os.getenv("PATH"), env.PATH)
      -- multibyte: one character, two bytes
      assert.equal("1\n", exec(h, "printf '\\u00e9' | wc -m"))
      assert.equal("2\n", exec(h, "printf '\\u00e9' | wc -c"))
      local f = assert(io.open("/etc/nsswitch.conf", "rb"))
      local host = f:read("a")
      f:close()
      assert.equal(host, exec(h, "cat /etc/nsswitch.conf"))
      h:stop(); h:wait()
    end)
  end)

  it("name the instance's user as the policy says", function()
    core.run(function()
      local h = S.start_sandboxd{ policies = policy_dir('user_name = "builder"') }
      assert.equal("builder\n", exec(h, "id -un"))
      assert.equal("builder:x:1000:1000:builder:/tmp/home:/bin/bash\n", exec(h, "getent passwd 1000"))
      assert.equal("builder:x:1000:\n", exec(h, "getent group 1000"))
      h:stop(); h:wait()
    end)
  end)
end)
