-- Black-box (issue 22 item 7): a thread's own files must not block the resident. A walled
-- thread fills its worktree with tens of thousands of files and removes its .git; the next
-- /attach re-makes the repository, which means removing the old tree. That removal runs off
-- the event loop (core.fs.remove_tree in a task: libuv's thread pool), so /healthz answers
-- while it runs; and the thread's instance keeps seeing its worktree (the directory is
-- emptied, never replaced: its /workspace is bound to that directory).
local core = require("switchboard.core")
local cjson = require("cjson")
local S = require("support.sandbox")
local workspace = require("switchboard.shell.workspace")
local R = require("support.resident")

local TOKEN = S.TOKEN
local DIRS, FILES = 50, 400 -- 20,000 files: removing them takes far longer than one /healthz

local function call(h, method, path, body, thread)
  local status, _, raw = core.http.request{ method = method, url = h.url .. path,
    headers = { authorization = "Bearer " .. TOKEN, ["x-thread-key"] = thread or "T1", ["content-type"] = "application/json" },
    body = body and cjson.encode(body) or nil, deadline_ms = 300000 }
  local ok, doc = pcall(cjson.decode, raw or "")
  return status, ok and doc or raw
end

local function entries(dir)
  local names = core.fs.list(dir)
  return names and #names or nil
end

after_each(S.cleanup_servers)
teardown(S.cleanup)

describe("resident: file-tree work off the event loop", function()
  it("a re-attach removing a large tree: /healthz answers while it is removed; the thread's /workspace is its worktree after", function()
    core.run(function()
      local base, dir = R.make_base(), R.policy_dir()
      local h = R.start_walled(base, { policies = dir }, pending)
      if not h then return end
      assert.equal("warm", R.onboard(h, "acme/api"))
      assert.equal(200, (call(h, "POST", "/attach", { repo = "acme/api" })))
      local status, r = call(h, "POST", "/exec", { command = ("mkdir big && cd big && for d in $(seq %d); do "
        .. "mkdir d$d && (cd d$d && seq %d | xargs touch); done && cd .. && rm -rf .git && echo made"):format(DIRS, FILES) })
      assert.equal(200, status)
      assert.equal("made\n", r.stdout, r.stderr)
      local big = workspace.path(h.root .. "/threads", "T1") .. "/big"
      assert.equal(DIRS, entries(big))

      local attached, attached_doc
      core.go(function() local st, doc = call(h, "POST", "/attach", { repo = "acme/api" }); attached_doc = doc; attached = st end)
      -- The removal has begun (big/ lost entries) and has not ended; a /healthz sent now is
      -- answered before it ends. With the removal on the loop no answer can come before the
      -- whole tree is gone, so the check after the answer fails there.
      local answered_during
      S.wait_for(function()
        local n = entries(big)
        if n == nil or attached then return true end -- the removal (or the attach) ended
        if n < DIRS then
          local st = core.http.request{ method = "GET", url = h.url .. "/healthz", deadline_ms = 300000,
            headers = { authorization = "Bearer " .. TOKEN } }
          local after = entries(big)
          if st == 200 and after ~= nil and after > 0 then answered_during = true; return true end
        end
        return false
      end, 300000, 5)
      assert.is_true(answered_during, "no /healthz was answered while the tree was being removed")
      assert.truthy(S.wait_for(function() return attached end, 300000))
      assert.equal(200, attached, cjson.encode(attached_doc))
      assert.is_false(core.fs.exists(big))
      -- the thread's instance sees the new repository at /workspace, not a deleted directory
      status, r = call(h, "POST", "/exec", { command = "cd /workspace && ls && git log --oneline | wc -l" })
      assert.equal(200, status)
      assert.equal(0, r.exitCode, r.stderr)
      assert.equal("README\ndeps\nsetup.sh\n1\n", r.stdout)
      h.stop(); h.wait()
    end)
  end)
end)
