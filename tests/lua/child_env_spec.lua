local P = require("support.policies")
local child_env = require("switchboard.shell.child_env")
local schema = require("switchboard.policy.schema")

describe("the base environment of a command", function()
  local host = {
    PATH = "/usr/bin:/bin", HOME = "/home/bot", LANG = "C.UTF-8",
    SLACK_BOT_TOKEN = "xoxb-1", ANTHROPIC_API_KEY = "sk-1", GITHUB_APP_PRIVATE_KEY = "pem",
    SANDBOX_TOKEN = "t", GH_TOKEN = "ghs_1", E2B_API_KEY = "e2b",
  }
  local function getenv(n) return host[n] end

  it("passes PATH, HOME and LANG from the host and none of the bot's secrets", function()
    local env = child_env.base(P.shipped(), getenv)
    assert.same({ PATH = "/usr/bin:/bin", HOME = "/home/bot", LANG = "C.UTF-8" }, env)
  end)

  it("adds the fixed values of child_env.set", function()
    local snap = assert(P.load(P.dir({ execution = function(s) return s .. '\nchild_env.set.CI = "1"\n' end })))
    assert.equal("1", child_env.base(snap, getenv).CI)
    P.cleanup()
  end)

  it("gives a walled command its instance's HOME (isolation.home), never the host's", function()
    local env = child_env.base(P.shipped(), getenv, true)
    assert.same({ PATH = "/usr/bin:/bin", HOME = "/tmp/home", LANG = "C.UTF-8" }, env)
    local snap = assert(P.load(P.dir({ isolation = function(s) return s .. '\nhome = "/tmp/h2"\n' end })))
    assert.equal("/tmp/h2", child_env.base(snap, getenv, true).HOME)
    assert.equal("/home/bot", child_env.base(snap, getenv, false).HOME)
    -- an operator's isolation.lua from before `home` (no such line) still loads: the schema's
    -- default, /tmp/home, is in its snapshot
    local older = assert(P.load(P.dir({ isolation = function(s) return (s:gsub('\nhome = "[^"]*"', "\n")) end })))
    assert.equal("/tmp/home", older.isolation.home)
    assert.equal("/tmp/home", child_env.base(older, getenv, true).HOME)
    P.cleanup()
  end)

  it("refuses a home that is not a directory directly under the instance's /tmp", function()
    for _, bad in ipairs({ "/root", "/workspace/home", "/tmp", "/tmp/", "/tmp/../root", "/tmp/a/b", "tmp/home" }) do
      local snap, err = P.load(P.dir({ isolation = function(s) return s .. ('\nhome = %q\n'):format(bad) end }))
      assert.is_nil(snap, bad)
      assert.is_true(P.has(err, "home", "a directory directly under /tmp"), table.concat(err or {}, "\n"))
    end
    P.cleanup()
  end)

  it("gives a walled instance its own accounts: root, its user (isolation.user_name) and nobody", function()
    local passwd, group = child_env.walled_accounts(P.shipped())
    assert.equal("root:x:0:0:root:/root:/usr/sbin/nologin\n"
      .. "sandbox:x:1000:1000:sandbox:/tmp/home:/bin/bash\n"
      .. "nobody:x:65534:65534:nobody:/nonexistent:/usr/sbin/nologin\n", passwd)
    assert.equal("root:x:0:\nsandbox:x:1000:\nnogroup:x:65534:\n", group)
    local snap = assert(P.load(P.dir({ isolation = function(s) return s .. '\nuser_name = "dev"\nhome = "/tmp/h2"\n' end })))
    passwd, group = child_env.walled_accounts(snap)
    assert.truthy(passwd:find("\ndev:x:1000:1000:dev:/tmp/h2:/bin/bash\n", 1, true), passwd)
    assert.truthy(group:find("\ndev:x:1000:\n", 1, true), group)
    -- an operator's isolation.lua from before `user_name` still loads: the schema's default, "sandbox"
    local older = assert(P.load(P.dir({ isolation = function(s) return (s:gsub('\nuser_name = "[^"]*"', "\n")) end })))
    assert.equal("sandbox", older.isolation.user_name)
    assert.truthy((child_env.walled_accounts(older)):find("\nsandbox:x:1000:", 1, true))
    -- a name that would break the file's lines is refused
    for _, bad in ipairs({ "a:b", "a\nroot", "Root", "1abc", "a b" }) do
      local bad_snap, err = P.load(P.dir({ isolation = function(s) return s .. ('\nuser_name = %q\n'):format(bad) end }))
      assert.is_nil(bad_snap, bad)
      assert.is_true(P.has(err, "user_name", "a user name"), table.concat(err or {}, "\n"))
    end
    for _, taken in ipairs({ "root", "nobody" }) do
      local taken_snap, err = P.load(P.dir({ isolation = function(s) return s .. ('\nuser_name = %q\n'):format(taken) end }))
      assert.is_nil(taken_snap, taken)
      assert.is_true(P.has(err, "user_name", "must not be \"root\" or \"nobody\""), table.concat(err or {}, "\n"))
    end
    P.cleanup()
  end)

  it("recognizes credential-shaped names", function()
    for _, n in ipairs({ "GH_TOKEN", "GITHUB_TOKEN", "API_KEY", "KEY", "SSH_KEY_PATH", "DB_PASSWORD", "SLACK_SIGNING_SECRET",
      "SLACK_APP_LEVEL", "ANTHROPIC_BASE_URL", "GITHUB_APP_ID", "E2B_DOMAIN", "AWS_SECRET_ACCESS_KEY", "NPM_AUTH_TOKEN" }) do
      assert.is_true(schema.is_secret_name(n), n)
    end
    for _, n in ipairs({ "PATH", "HOME", "LANG", "KEYBOARD", "MONKEY", "GIT_AUTHOR_NAME", "TERM", "TZ" }) do
      assert.is_false(schema.is_secret_name(n), n)
    end
  end)
end)
