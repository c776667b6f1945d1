-- The agent run's pieces on the shipped policy: the tools each agent is offered and what they
-- say, how a free-text ask names its repository, the clone command, the run card's text, and
-- the run loop itself over a scripted client and executor (every tool_use answered once, in
-- order; fail-fast; stop).
local core = require("switchboard.core")
local tools = require("switchboard.agent.tools")
local ask = require("switchboard.dispatch.agent_run")
local repo = require("switchboard.agent.repo")
local run = require("switchboard.agent.run")
local run_card = require("switchboard.dispatch.run_card")
local errors = require("switchboard.exec.errors")
local health = require("switchboard.exec.health")
local policy = require("switchboard.policy")
local P = require("support.policies")

local snap = P.shipped()

describe("agent tools", function()
  it("bash states its default, its ceiling and that a larger timeoutMs asks for more time", function()
    local defs = tools.definitions(snap, policy.agent(snap, "coding"))
    assert.same({ "bash", "read_file", "write_file" }, { defs[1].name, defs[2].name, defs[3].name })
    local d = defs[1].description
    assert.matches("5 min (300000 ms) by default, at most 20 min (1200000 ms)", d, 1, true)
    assert.matches("larger timeoutMs", d, 1, true)
    assert.same({ "command" }, defs[1].input_schema.required)
  end)

  it("gives the readonly review agent no write_file, and general no tools", function()
    local names = {}
    for _, t in ipairs(tools.definitions(snap, policy.agent(snap, "review"))) do names[#names + 1] = t.name end
    assert.same({ "bash", "read_file", "glob", "grep", "list", "todo_write" }, names)
    assert.same({}, tools.definitions(snap, policy.agent(snap, "general")))
    -- a readonly entry that lists write_file anyway is still not offered it
    assert.same({}, tools.definitions(snap, { readonly = true, tools = { "write_file" } }))
  end)

  it("describes the running call by its command's first line", function()
    assert.equal("$ npm test", tools.describe({ name = "bash", input = { command = "  npm test\nnpm run lint" } }))
    assert.equal("read_file src/a.c", tools.describe({ name = "read_file", input = { path = "src/a.c" } }))
  end)
end)

describe("a long tool result", function()
  it("keeps its head and tail within the bound, on UTF-8 boundaries, naming where the whole is", function()
    local text = require("switchboard.agent.text")
    local out, cut = text.bound(("é"):rep(200000), 30000, 40, ".git/switchboard-outputs/turn-1-x.txt")
    assert.is_true(cut)
    assert.is_true(utf8.len(out) <= 30000 + 300)
    assert.matches("170000 of 200000 characters cut here", out, 1, true)
    assert.matches("saved at .git/switchboard-outputs/turn-1-x.txt: read it with read_file", out, 1, true)
    assert.truthy(utf8.len(out))
    assert.equal("short", (text.bound("short", 30000, 40)))
    assert.equal("ab\u{FFFD}\u{FFFD}c", text.valid("ab\xff\xfec"))
  end)
end)

describe("a free-text ask's repository", function()
  it("is a GitHub URL anywhere, or OWNER/REPO after in/on/of/for", function()
    assert.equal("octo/app", ask.repo_in("the tests in octo/app fail on main, fix them"))
    assert.equal("octo/app", ask.repo_in("look at https://github.com/octo/app/pull/3 please"))
    assert.equal("octo/app", ask.repo_in("review https://github.com/octo/app.git."))
    assert.equal("a-b/c.d", ask.repo_in("work on a-b/c.d."))
    assert.is_nil(ask.repo_in("make a file hello.txt containing hi, then show it"))
    assert.is_nil(ask.repo_in("compare src/main and/or lib/x"))
  end)
end)

describe("the clone command", function()
  it("gives git the token only through a credential helper reading GH_TOKEN", function()
    local s = repo.script(repo.url(snap, "acme/api"))
    assert.matches("git \"$@\" clone --quiet 'https://github.com/acme/api.git' .", s, 1, true)
    assert.matches("credential.helper=!f() {", s, 1, true)
    assert.matches('password=$GH_TOKEN', s, 1, true)
    assert.matches("fetch --quiet origin", s, 1, true)
  end)

  it("runs the repository's setup without the token, and asks for its prepared base with the push heard of", function()
    local s = repo.script(repo.url(snap, "acme/api"), "b", true, 90)
    assert.matches("env -u GH_TOKEN timeout -k 5 90 bash .switchboard/setup.sh", s, 1, true)
    local seen
    local ex = { exec = function(_, _, opts)
      seen = opts
      return { exit_code = 0, stdout = "cloned\nsetup failed-124\n" }
    end }
    local done, on_branch, setup = repo.prepare(ex, snap, "acme/api", { branch = "b", base_since = 42 })
    assert.equal("cloned", done)
    assert.is_nil(on_branch)
    assert.equal("failed-124", setup)
    assert.equal("acme/api", seen.base)
    assert.equal(42, seen.base_since)
  end)
end)

describe("the run card", function()
  it("shows the ask, the turn, the running call, elapsed time and tokens; then the answer", function()
    local c = run_card.new{ thread = "main", agent = "coding", ask = "fix it", repo = "acme/api", max_turns = 5 }
    c:provisioned("local", nil)
    c:running(0)
    c:turn(2)
    c:tool("$ npm test")
    c:usage(12345, 678)
    assert.equal("[main] agent:coding · local · acme/api\n> fix it\n… turn 2 · $ npm test · 3s · 12,345 tokens in / 678 out",
      c:render{ max_chars = 4000, now_ms = 3400 })
    assert.equal("[main] coding turn 2 3s", c:summary(3400))
    c:ended("done", 4200, "All green.")
    assert.equal("[main] agent:coding · local · acme/api\n> fix it\n✓ done after 2 turns in 4.2s · 12,345 tokens in / 678 out\nAll green.",
      c:render{ max_chars = 4000, now_ms = 9000 })
    assert.equal("agent", c.kind) -- fields a front renders itself
  end)
end)

-- The loop over a scripted client and a scripted executor wrapped in the health tracker.
describe("the run loop", function()
  local function use(id, command) return { type = "tool_use", id = id, name = "bash", input = { command = command } } end
  local function msg(content, stop) return { content = content, stop_reason = stop, usage = { input_tokens = 1, output_tokens = 1 } } end

  local function core_copy(t) -- requests are mutated turn by turn: keep what was sent
    return require("cjson").decode(require("cjson").encode(t))
  end

  local function harness(answers, exec)
    local sent = {}
    local inner = { backend = "local", exec = exec }
    local tracker = health.new(inner, snap)
    local o = {
      snap = snap, def = policy.agent(snap, "coding"), agent = "coding", executor = tracker, tracker = tracker,
      client = { create = function(_, body)
        sent[#sent + 1] = core_copy(body)
        local a = table.remove(answers, 1)
        if a.err then return nil, a.err end
        return a
      end },
      events = run_card.events(run_card.new{ thread = "t", agent = "coding", ask = "x" }, core.now_ms), signal = core.signal(),
      deadline_ms = core.now_ms() + 600000, ask = "do it",
    }
    return o, sent
  end

  it("answers every tool_use of an answer once, in order, and finishes on end_turn", function()
    local ran = {}
    local o, sent = harness({
      msg({ { type = "text", text = "two calls" }, use("a", "echo 1"), use("b", "exit 3") }, "tool_use"),
      msg({ { type = "text", text = "done" } }, "end_turn"),
    }, function(_, command)
      ran[#ran + 1] = command
      local code = command == "exit 3" and 3 or 0
      return { exit_code = code, text = code == 0 and "1" or "exit 3:" }
    end)
    local state, answer = run.run(o)
    assert.equal("done", state)
    assert.equal("done", answer)
    assert.same({ "echo 1", "exit 3" }, ran)
    local results = sent[2].messages[3].content
    assert.same({ "a", "b" }, { results[1].tool_use_id, results[2].tool_use_id })
    assert.equal("exit 3:", results[2].content)
    assert.is_nil(results[2].is_error) -- a nonzero exit is a result
  end)

  it("stops at once at the infra limit; later calls of the answer are recorded as not run", function()
    local calls = 0
    local o, sent = harness({
      msg({ use("a", "1") }, "tool_use"),
      msg({ use("b", "2"), use("c", "3") }, "tool_use"),
      msg({ { type = "text", text = "never" } }, "end_turn"),
    }, function()
      calls = calls + 1
      return nil, errors.infra("sandbox unreachable")
    end)
    local state, _, problem = run.run(o)
    assert.equal("infra", state)
    assert.equal(2, calls)
    assert.equal(2, #sent)
    assert.matches("failed 2 times in a row", problem, 1, true)
    assert.matches("sandbox unreachable", problem, 1, true)
  end)

  it("a capacity error is a tool_result for the model, not infra", function()
    local n = 0
    local o, sent = harness({
      msg({ use("a", "1") }, "tool_use"), msg({ use("b", "2") }, "tool_use"), msg({ use("c", "3") }, "tool_use"),
      msg({ { type = "text", text = "ok" } }, "end_turn"),
    }, function()
      n = n + 1
      return nil, errors.capacity("sandbox fleet busy — no free per-thread sandbox after waiting 3s", 3000)
    end)
    assert.equal("done", (run.run(o)))
    assert.equal(3, n)
    assert.matches("^⏳ Sandbox fleet busy", sent[2].messages[3].content[1].content)
    assert.equal(0, o.tracker.count)
  end)

  it("stops at max_turns with the last answer and says so", function()
    local o, sent = harness({
      msg({ { type = "text", text = "one" }, use("a", "1") }, "tool_use"),
      msg({ { type = "text", text = "two" }, use("b", "2") }, "tool_use"),
      msg({ { type = "text", text = "never" } }, "end_turn"),
    }, function() return { exit_code = 0, text = "ok" } end)
    o.def = setmetatable({ max_turns = 2 }, { __index = o.def })
    local state, answer, problem = run.run(o)
    assert.equal("turns", state)
    assert.equal("two", answer)
    assert.equal(2, #sent)
    assert.matches("used its 2 turns", problem, 1, true)
  end)

  it("ends as stopped when the hard stop fires during a call", function()
    local o, sent = harness({ msg({ use("a", "1"), use("b", "2") }, "tool_use") }, nil)
    o.executor.inner.exec = function()
      o.signal:abort("stop asked")
      return { exit_code = 143, aborted = true, text = "[stopped]" }
    end
    assert.equal("stopped", (run.run(o)))
    assert.equal(1, #sent)
  end)
end)
