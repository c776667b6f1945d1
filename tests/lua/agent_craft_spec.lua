-- Agent craft's pieces on the shipped policy (the whole flow runs black-box in
-- tests/e2e/agent_craft_spec.lua): the instruction files' bounds, edit_file's answers, the
-- thread's branch, what a refused push or API call says, the Slack thread's permalink, and
-- what the loader refuses.
local core = require("switchboard.core")
local tools = require("switchboard.agent.tools")
local instructions = require("switchboard.agent.instructions")
local publish = require("switchboard.agent.publish")
local pulls = require("switchboard.github.pulls")
local slack_front = require("switchboard.fronts.slack.front")
local errors = require("switchboard.exec.errors")
local policy = require("switchboard.policy")
local P = require("support.policies")

local snap = P.shipped()

-- An executor over a table of files (path → bytes); writes land in the table.
local function fake(files_)
  local ex = { files = files_, writes = 0 }
  function ex.read_file(self, path)
    local b = self.files[path]
    if b == nil then return nil, errors.tool(path .. ": no such file in the workspace") end
    return b
  end
  function ex.write_file(self, path, bytes)
    self.writes = self.writes + 1
    self.files[path] = bytes
    return true
  end
  return ex
end

local function edit(ex, input, def)
  return tools.call(ex, snap, def or policy.agent(snap, "coding"),
    { id = "t", name = "edit_file", input = input }, { signal = core.signal(), remaining_ms = 60000 })
end

describe("edit_file", function()
  it("is offered beside write_file to coding, and to no readonly agent", function()
    assert.is_true(tools.offered(snap, policy.agent(snap, "coding"), "edit_file"))
    assert.is_false(tools.offered(snap, policy.agent(snap, "review"), "edit_file"))
    assert.same({}, tools.definitions(snap, { readonly = true, tools = { "edit_file", "write_file" } }))
    local out = edit(fake{ a = "x" }, { path = "a", old_text = "x", new_text = "y" }, policy.agent(snap, "review"))
    assert.is_true(out.is_error)
    assert.matches('there is no tool "edit_file"', out.content, 1, true)
  end)

  it("replaces a unique text; refuses a repeated or missing one, saying how often and where", function()
    local ex = fake{ ["m.c"] = "int a;\nint b;\nint a;\nreturn a + b;\n" }
    local out = edit(ex, { path = "m.c", old_text = "int a;", new_text = "long a;" })
    assert.is_true(out.is_error)
    assert.equal("edit_file: old_text occurs 2 times in m.c (at lines 1, 3), so nothing was changed. "
      .. "Include more of the surrounding lines to make it unique, or set replace_all to true to replace all 2.", out.content)
    out = edit(ex, { path = "m.c", old_text = "retrun a+b;", new_text = "x" })
    assert.is_true(out.is_error)
    assert.matches("occurs 0 times in m.c", out.content, 1, true)
    assert.matches("    4> return a + b;", out.content, 1, true)
    assert.equal(0, ex.writes)
    out = edit(ex, { path = "m.c", old_text = "int b;\nint a;", new_text = "int c;" })
    assert.equal("edited m.c: replaced 1 occurrence at line 2", out.content)
    assert.equal("int a;\nint c;\nreturn a + b;\n", ex.files["m.c"])
    out = edit(ex, { path = "m.c", old_text = "a", new_text = "z", replace_all = true })
    assert.equal("edited m.c: replaced 2 occurrences (the first at line 1)", out.content)
    assert.equal("int z;\nint c;\nreturn z + b;\n", ex.files["m.c"])
  end)

  it("refuses binary files, empty old_text and a missing file as tool errors", function()
    local ex = fake{ ["b.bin"] = "ab\0cd" }
    assert.matches("not a text file", edit(ex, { path = "b.bin", old_text = "ab", new_text = "x" }).content, 1, true)
    assert.matches("old_text is empty", edit(ex, { path = "b.bin", old_text = "", new_text = "x" }).content, 1, true)
    local out = edit(ex, { path = "nope", old_text = "a", new_text = "b" })
    assert.is_true(out.is_error)
    assert.equal("tool", out.kind)
    assert.equal(0, ex.writes)
  end)
end)

describe("repository instructions", function()
  it("a subdirectory's AGENTS.md and CLAUDE.md: found above the paths, once, and not again after a follow-up's history", function()
    local ex = fake{ ["pkg/AGENTS.md"] = "pkg rules\n", ["pkg/api/CLAUDE.md"] = "api rules\n", ["docs/AGENTS.md"] = "docs\n" }
    local st = instructions.nested_state()
    local ctx = { signal = core.signal(), remaining_ms = 60000 }
    local found = instructions.nested(ex, snap, { "pkg/api/h.go", "pkg/x.go", ".git/switchboard-scratch/n.txt", "../x/y" }, st, ctx)
    assert.same({ "pkg/AGENTS.md", "pkg/api/CLAUDE.md" }, { found[1].path, found[2].path })
    assert.same({ "pkg/AGENTS.md", "pkg/api/CLAUDE.md" }, st.used)
    assert.same({}, instructions.nested(ex, snap, { "pkg/api/other.go" }, st, ctx)) -- once per directory
    local text = instructions.nested_text(found[2])
    assert.matches("^%[The instructions in pkg/api/CLAUDE.md apply to the files under pkg/api/ ", text)
    -- a follow-up whose history carries them does not add them again
    local again = instructions.nested_seen_in(instructions.nested_state(),
      { { role = "user", content = { { type = "tool_result", tool_use_id = "t", content = "x" }, { type = "text", text = text } } } })
    local more = instructions.nested(ex, snap, { "pkg/api/h.go" }, again, ctx)
    assert.same({ "pkg/AGENTS.md" }, { more[1].path })
    assert.equal(1, #more)
  end)

  it("reads the listed files in order, cuts at the bounds with a note, never drops one silently", function()
    local s = setmetatable({ agents = setmetatable({ instructions = {
      files = { "AGENTS.md", "CLAUDE.md", "BIN.md", "X.md", "LATE.md" }, max_file_bytes = 300, max_total_bytes = 308,
    } }, { __index = snap.agents }) }, { __index = snap })
    local got = instructions.read(fake{
      ["AGENTS.md"] = "be kind\n", ["CLAUDE.md"] = ("é"):rep(400), ["BIN.md"] = "\0\1", ["LATE.md"] = "late",
    }, s, {})
    assert.equal("instructions: AGENTS.md, CLAUDE.md (cut to 300 of 800 bytes), BIN.md (left out: not text), "
      .. "LATE.md (left out: instructions.max_total_bytes used)", got.note)
    assert.matches("### AGENTS.md\nbe kind\n", got.text, 1, true)
    assert.matches("[cut here: CLAUDE.md is 800 bytes; only the first 300 are shown (instructions.max_file_bytes", got.text, 1, true)
    assert.truthy(utf8.len(got.text))
    assert.matches("### LATE.md", got.text, 1, true) -- named, with why it is not there
    local prompt = instructions.append("base", got)
    assert.matches("^base\n\n## The repository's instructions for agents", prompt)
    assert.equal("base", instructions.append("base", instructions.read(fake{}, s, {})))
  end)
end)

describe("the pull request's branch and failures", function()
  it("names the thread's branch from policy, the same for every run of the thread", function()
    local a = publish.branch(snap, "C1/1700000000.000100", "slack:C1/1700000000.000100")
    assert.matches("^switchboard/c1%-1700000000%-000100%-%x%x%x%x%x%x%x%x$", a)
    assert.equal(a, publish.branch(snap, "C1/1700000000.000100", "slack:C1/1700000000.000100"))
    assert.not_equal(a, publish.branch(snap, "C1/1700000000.000200", "slack:C1/1700000000.000200"))
  end)

  it("says what a refused push means and what to do", function()
    local function kind(text) return publish.push_problem("acme/api", "b", text).kind end
    assert.equal("protected", kind("remote: error: GH006: Protected branch update failed for refs/heads/b."))
    assert.equal("conflict", kind("!\tHEAD:refs/heads/b\t[rejected] (fetch first)"))
    assert.equal("push_refused", kind("remote: Permission to acme/api.git denied to bot.\nfatal: unable to access 'x': The requested URL returned error: 403"))
    assert.equal("not_found", kind("remote: Repository not found.\nfatal: repository 'x' not found"))
    -- git's words for a token GitHub no longer accepts name the remote's address: a port (or a
    -- repository, or a branch) with 403 in it is not a 403 (git 2.39 against the stand-in on 40399)
    assert.equal("credential", kind("fatal: Authentication failed for 'http://127.0.0.1:40399/acme/api.git/'"))
    assert.equal("credential", publish.push_problem("acme/http-403", "fix-403-denied",
      "fatal: Authentication failed for 'https://github.com/acme/http-403.git/'").kind)
    assert.equal("push_refused", publish.push_problem("acme/http-401", "b",
      "remote: Permission to acme/http-401.git denied to bot.\nfatal: unable to access 'https://github.com/acme/http-401.git/': The requested URL returned error: 403").kind)
    -- the script's own lines before git's (the base, the run's file list) are no part of the
    -- words: a changed file named …denied… is no 403, and the card shows git's words alone
    local out = "@@base main\n@@file A\tdocs/denied-403.md\n@@file M\tsrc/a.c\n"
      .. "fatal: Authentication failed for 'http://127.0.0.1:40399/acme/api.git/'\n"
    local words = publish.git_words(out)
    assert.equal("fatal: Authentication failed for 'http://127.0.0.1:40399/acme/api.git/'", words)
    assert.equal("credential", kind(words))
    local err = publish.push_problem("acme/api", "b", "The requested URL returned error: 403")
    assert.is_true(require("switchboard.core").is_error(err))
    assert.matches('token_scope = "write"', tostring(err), 1, true)
  end)

  it("says what a refused pull-request call means", function()
    assert.matches("Pull requests: Read and write", pulls.explain(403, { message = "Resource not accessible by integration" }, "open a pull request", "acme/api"), 1, true)
    assert.matches("not installed", pulls.explain(404, nil, "open a pull request", "acme/api"), 1, true)
    assert.matches("A pull request already exists", pulls.explain(422, { message = "Validation Failed",
      errors = { { message = "A pull request already exists for acme:b." } } }, "open a pull request", "acme/api"), 1, true)
  end)
end)

describe("the Slack thread's permalink", function()
  it("is looked up with chat.getPermalink on the thread's first message, only when asked", function()
    local calls = {}
    local api = { call = function(_, method, args)
      calls[#calls + 1] = { method = method, args = args }
      return { ok = true, permalink = "https://acme.slack.com/archives/C1/p1700000000000100" }
    end }
    local f = slack_front.new{ api = api, policy = function() return snap end, log = function() end }
    assert.is_nil(f:link_for("T/C1/1700000000.000100", nil)) -- no ask's address: no link
    -- the address travels in the ask (the message's reply_to); the front keeps nothing per thread
    local link = f:link_for("T/C1/1700000000.000100", { channel = "C1", thread_ts = "1700000000.000100" })
    assert.equal(0, #calls)
    assert.equal("https://acme.slack.com/archives/C1/p1700000000000100", link())
    assert.same({ method = "chat.getPermalink", args = { channel = "C1", message_ts = "1700000000.000100" } }, calls[1])
  end)
end)

describe("the loader", function()
  local function load(edit_src)
    local dir = P.dir{ agents = edit_src }
    return P.load(dir)
  end
  after_each(function() P.cleanup() end)

  it("refuses edit_file or pull_requests on a readonly agent", function()
    local _, errs = load(function(src)
      return (src:gsub('tools = { "bash", "read_file", "glob", "grep", "list", "todo_write" },', 'tools = { "bash", "read_file", "edit_file" },\n  pull_requests = true,', 1))
    end)
    assert.is_not_nil(errs)
    local text = table.concat((function() local t = {} for _, e in ipairs(errs) do t[#t + 1] = tostring(e.message or e) .. " @ " .. tostring(e.path) end return t end)(), "\n")
    assert.matches("a readonly agent cannot have edit_file", text, 1, true)
    assert.matches("a readonly agent never pushes", text, 1, true)
  end)

  it("refuses a branch template without {short_id}", function()
    local _, errs = load(function(src) return (src:gsub('branch = "switchboard/{thread}%-{short_id}"', 'branch = "switchboard/{thread}"', 1)) end)
    assert.is_not_nil(errs)
  end)
end)
