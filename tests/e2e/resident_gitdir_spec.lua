-- Black-box (issue 35 item 7): the resident never follows a git directory the thread controls.
-- A walled thread's worktree is its own, `.git` included; /attach answers the thread's HEAD.
-- The resident used to ask its own git (its user, safe.directory=*) in the worktree, so a
-- thread that replaced `.git` by `gitdir: <another repository's checkout>/.git`, or pointed a
-- ref of its own at another repository's ref file, got that repository's HEAD in the answer.
-- Now the thread's own git answers, in its walls, where no other repository is in view. An
-- honest thread's answer is unchanged: its commit, the checkout's at first, its own later.
local core = require("switchboard.core")
local cjson = require("cjson")
local S = require("support.sandbox")
local R = require("support.resident")

local function call(h, method, path, body, thread)
  local status, _, raw = core.http.request{ method = method, url = h.url .. path,
    headers = { authorization = "Bearer " .. R.TOKEN, ["x-thread-key"] = thread, ["content-type"] = "application/json" },
    body = body and cjson.encode(body) or nil, deadline_ms = 300000 }
  local ok, doc = pcall(cjson.decode, raw or "")
  return status, ok and doc or raw
end

local function git(dir, args)
  local p = io.popen(("env -u LD_PRELOAD git -C %s %s 2>&1"):format(dir, args))
  local out = p:read("a")
  p:close()
  return out
end

-- A second bare repository, base/acme/secret, whose commit is not acme/api's.
local function add_secret(base)
  R.sh(("cd %s && mkdir src2 && cd src2 && git init -q && echo secret > SECRET && printf 'true\\n' > setup.sh"
    .. " && git add -A && git -c user.email=s@s -c user.name=s commit -qm secret"
    .. " && git clone -q --bare %s/src2 %s/base/acme/secret"):format(base, base, base))
end

after_each(S.cleanup_servers)
teardown(S.cleanup)

describe("resident: a thread's .git is never the resident's to follow", function()
  it("a gitfile or a linked ref to another repository's checkout: /attach does not answer that repository's HEAD; an honest thread gets its own", function()
    core.run(function()
      local base, dir = R.make_base(), R.policy_dir()
      add_secret(base)
      local h = R.start_walled(base, { policies = dir }, pending)
      if not h then return end
      assert.equal("warm", R.onboard(h, "acme/api"))
      assert.equal("warm", R.onboard(h, "acme/secret"))
      local secret = h.root .. "/repos/acme/secret/checkout"
      local secret_head = git(secret, "rev-parse HEAD"):match("^(%x+)\n$")
      local api_head = git(h.root .. "/repos/acme/api/checkout", "rev-parse HEAD"):match("^(%x+)\n$")
      assert.truthy(secret_head and api_head and secret_head ~= api_head)

      -- an honest thread: the checkout's commit, then its own after it commits
      local status, a = call(h, "POST", "/attach", { repo = "acme/api" }, "honest")
      assert.equal(200, status, cjson.encode(a))
      assert.equal(api_head, a.commit)
      local r
      status, r = call(h, "POST", "/exec", { command = "echo more >> README && git -c user.email=t@t -c user.name=t "
        .. "commit -qam mine && id -u >&2 && git rev-parse HEAD" }, "honest")
      assert.equal(200, status)
      assert.equal(0, r.exitCode, r.stderr)
      assert.equal("1000\n", r.stderr) -- walled: the instance's uid, not the resident's
      status, a = call(h, "POST", "/attach", { repo = "acme/api" }, "honest")
      assert.equal(200, status, cjson.encode(a))
      assert.is_true(a.reused)
      assert.equal(r.stdout, a.commit .. "\n")

      -- a gitfile naming the other repository's checkout
      status = call(h, "POST", "/attach", { repo = "acme/api" }, "gitfile")
      assert.equal(200, status)
      status, r = call(h, "POST", "/exec", { command = ("rm -rf .git && printf 'gitdir: %s/.git\\n' > .git && cat .git")
        :format(secret) }, "gitfile")
      assert.equal(200, status)
      assert.equal(0, r.exitCode, r.stderr)
      local gitfile_status, gitfile = call(h, "POST", "/attach", { repo = "acme/api" }, "gitfile")

      -- a ref of its own that is a link to the other checkout's branch file
      local branch = git(secret, "symbolic-ref HEAD"):match("^(%S+)\n$")
      status = call(h, "POST", "/attach", { repo = "acme/api" }, "linked")
      assert.equal(200, status)
      status, r = call(h, "POST", "/exec", { command = ("mkdir -p .git/refs/heads && ln -sfn %s/.git/%s .git/refs/heads/stolen"
        .. " && git symbolic-ref HEAD refs/heads/stolen && echo linked"):format(secret, branch) }, "linked")
      assert.equal(200, status)
      assert.equal(0, r.exitCode, r.stderr)
      local linked_status, linked = call(h, "POST", "/attach", { repo = "acme/api" }, "linked")
      -- neither answer carries the other repository's HEAD
      local answers = cjson.encode({ gitfile = gitfile, linked = linked })
      assert.is_nil(answers:find(secret_head, 1, true), "another repository's HEAD answered: " .. answers)
      assert.equal(200, gitfile_status, answers)
      assert.is_true(gitfile.reused)
      assert.is_nil(gitfile.commit, answers) -- the thread's git sees no repository there
      assert.equal(200, linked_status, answers)
      h.stop(); h.wait()
      S.rm(base)
    end)
  end)
end)
