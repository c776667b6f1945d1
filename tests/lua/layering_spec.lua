-- The floors stay floors: no lower layer includes or requires an upper one. The allowed
-- dependencies are the two tables of ARCHITECTURE.md ("Who may depend on whom"); the checker
-- is tests/support/layering.lua.
local layering = require("support.layering")
local files = require("support.files")

local function tables()
  return layering.tables_from_markdown(assert(files.read("ARCHITECTURE.md")))
end

-- Dependencies the tree still has that the tables forbid, each with the change that removes
-- it. An entry that no longer occurs fails the spec: delete it here when its fix lands.
local KNOWN = {}

local function key(p) return ("%s %s -> %s"):format(p.lang, p.from, tostring(p.to)) end

local function write(path, text)
  os.execute(("mkdir -p '%s'"):format(path:match("^(.*)/")))
  local f = assert(io.open(path, "wb"))
  f:write(text)
  f:close()
end

local function texts(problems)
  local out = {}
  for _, p in ipairs(problems) do out[#out + 1] = p.text end
  return table.concat(out, "\n")
end

describe("the floors", function()
  it("the tree has no dependency the tables of ARCHITECTURE.md forbid", function()
    local unexpected, seen = {}, {}
    for _, p in ipairs(layering.check(".", tables())) do
      if KNOWN[key(p)] then seen[key(p)] = true else unexpected[#unexpected + 1] = p end
    end
    assert(#unexpected == 0, "\n" .. texts(unexpected))
    for k in pairs(KNOWN) do
      assert(seen[k], ("%q no longer occurs: remove it from KNOWN in tests/lua/layering_spec.lua"):format(k))
    end
  end)

  it("the tables name every Lua folder and top-level module of the program", function()
    local t = tables()
    for _, unit in ipairs({ "policy", "shell", "exec", "sandboxd", "dispatch", "fronts",
                            "launch", "commands", "cli", "github", "args", "state" }) do
      assert(t.lua[unit], "no Lua row for " .. unit)
    end
    assert.same({}, t.lua.policy)
    assert.same({ "log" }, t.c.engine)
    assert.same({ "engine", "log" }, t.c_default)
  end)
end)

describe("the rooms", function()
  local function tracked(paths)
    local out = {}
    local p = io.popen("git ls-files -- " .. paths .. " 2>/dev/null")
    for line in p:lines() do out[#out + 1] = line end
    p:close()
    return out
  end
  local text = assert(files.read("ARCHITECTURE.md"))

  it("every file of the program is named in its room's row of ARCHITECTURE.md", function()
    local list = tracked("lua/switchboard")
    if #list == 0 then pending("not a git checkout") return end
    local missing = layering.unnamed_files("lua/switchboard", list,
      layering.rooms_from_markdown(text, "The rooms of the program"))
    assert(#missing == 0, "files no row of 'The rooms of the program' names:\n" .. table.concat(missing, "\n"))
  end)

  it("every top-level folder of the repository has a row", function()
    local list = tracked(".")
    if #list == 0 then pending("not a git checkout") return end
    local rows, missing, seen = layering.rooms_from_markdown(text, "The rest of the repository"), {}, {}
    for _, path in ipairs(list) do
      local top = path:match("^([^/]+)/")
      if top and not rows[top] and not seen[top] then seen[top] = true; missing[#missing + 1] = top end
    end
    assert(#missing == 0, "folders no row of 'The rest of the repository' names:\n" .. table.concat(missing, "\n"))
  end)

  it("the check catches a file its room's row does not name", function()
    local rooms = { shell = "`run.lua`", fronts = "(`slack/`: `app.lua`)" }
    assert.same({ "shell/new.lua", "fronts/slack/new.lua" }, layering.unnamed_files("lua/switchboard",
      { "lua/switchboard/shell/run.lua", "lua/switchboard/shell/new.lua", "lua/switchboard/cli.lua",
        "lua/switchboard/fronts/slack/app.lua", "lua/switchboard/fronts/slack/new.lua" }, rooms))
  end)
end)

describe("the floors checker", function()
  local root
  before_each(function() root = files.tmpdir() end)
  after_each(function() os.execute(("rm -rf '%s'"):format(root)) end)

  local TABLES = {
    c = { log = {}, engine = { "log" }, main = { "engine", "log", "proc" } },
    c_default = { "engine", "log" },
    lua = { policy = {}, shell = { "policy" }, exec = { "shell", "policy" }, cli = { "exec" } },
  }

  local function clean_tree()
    write(root .. "/src/log/log.h", "void sb_log_write(const char *s);\n")
    write(root .. "/src/log/log.c", '#include "log.h"\nvoid sb_log_write(const char *s) {\n  (void)s;\n}\n')
    write(root .. "/src/engine/engine.h", "int sb_engine_run(void);\n")
    write(root .. "/src/engine/engine.c", '#include "engine.h"\n#include "../log/log.h"\n'
      .. "int sb_engine_run(void) {\n  sb_log_write(\"x\");\n  return 0;\n}\n")
    write(root .. "/src/proc/proc.h", "int sb_proc_open(void);\n")
    write(root .. "/src/proc/proc.c", '#include "proc.h"\n#include "../engine/engine.h"\n'
      .. "/* sb_proc_open is named in prose here: not a use */\n"
      .. "int sb_proc_open(void) {\n  return sb_engine_run();\n}\n")
    write(root .. "/src/main.c", '#include "engine/engine.h"\n#include "proc/proc.h"\n#include <stdio.h>\n'
      .. "int main(void) {\n  return sb_proc_open();\n}\n")
    write(root .. "/lua/switchboard/policy/init.lua", "return {}\n")
    write(root .. "/lua/switchboard/shell/run.lua",
      '-- require("switchboard.exec.local") in a comment is not a dependency\n'
      .. '--[[ nor require("switchboard.cli") in a long one ]]\n'
      .. 'local core = require("switchboard.core")\nlocal p = require "switchboard.policy"\nreturn {}\n')
    write(root .. "/lua/switchboard/exec/local.lua", 'local run = require("switchboard.shell.run")\nreturn {}\n')
    write(root .. "/lua/switchboard/cli.lua", 'local ex = require("switchboard.exec.local")\nreturn {}\n')
  end

  it("passes a tree that keeps its floors (comments and prose do not count)", function()
    clean_tree()
    assert.equal("", texts(layering.check(root, TABLES)))
  end)

  it("fails on a Lua require of an upper floor, naming the file, line and both units", function()
    clean_tree()
    write(root .. "/lua/switchboard/shell/run.lua", 'local p = require("switchboard.policy")\n'
      .. 'local ex = pcall(require, "switchboard.exec." .. "local")\nreturn {}\n')
    local problems = layering.check(root, TABLES)
    assert.equal(1, #problems)
    assert.equal("shell", problems[1].from)
    assert.equal("exec", problems[1].to)
    assert.equal(2, problems[1].line)
    assert.truthy(problems[1].text:find("shell/run.lua:2: shell may not depend on exec", 1, true))
  end)

  it("fails on a C #include of an upper floor's header", function()
    clean_tree()
    write(root .. "/src/engine/timer.c", '#include "engine.h"\n#include "../proc/proc.h"\n')
    local problems = layering.check(root, TABLES)
    assert.equal(1, #problems, texts(problems))
    assert.same({ "engine", "proc", 2 }, { problems[1].from, problems[1].to, problems[1].line })
    assert.truthy(problems[1].text:find('#include "../proc/proc.h"', 1, true))
  end)

  it("fails when a lower floor names an upper floor's function (a declaration in its own header)", function()
    clean_tree()
    write(root .. "/src/engine/engine.h", "int sb_engine_run(void);\nint sb_proc_open(void);\n")
    local problems = layering.check(root, TABLES)
    assert.equal(1, #problems, texts(problems))
    assert.same({ "engine", "proc" }, { problems[1].from, problems[1].to })
    assert.truthy(problems[1].file:find("engine.h$"))
  end)

  it("a feature module may not lean on another feature module", function()
    clean_tree()
    write(root .. "/src/http/client.c", '#include "../engine/engine.h"\n'
      .. "static int use(void) {\n  return sb_proc_open();\n}\n")
    local problems = layering.check(root, TABLES)
    assert.equal(1, #problems, texts(problems))
    assert.same({ "http", "proc" }, { problems[1].from, problems[1].to })
  end)

  it("a Lua folder with no row is a problem of its own", function()
    clean_tree()
    write(root .. "/lua/switchboard/newroom/x.lua", "return {}\n")
    local problems = layering.check(root, TABLES)
    assert.equal(1, #problems)
    assert.truthy(problems[1].text:find("newroom", 1, true))
  end)

  it("catches a forbidden require and include added to a copy of this tree", function()
    os.execute(("cp -r src lua ARCHITECTURE.md '%s'/"):format(root))
    local function append(path, text)
      local f = assert(io.open(root .. "/" .. path, "ab"))
      f:write(text)
      f:close()
    end
    append("lua/switchboard/shell/run.lua", '\nlocal _ = require("switchboard.exec.local")\n')
    append("lua/switchboard/policy/template.lua", '\nlocal _ = require("switchboard.dispatch.card")\n')
    append("src/proc/proc.c", '\n#include "../http/server_conn.h"\n')
    local added = {}
    for _, p in ipairs(layering.check(root, tables())) do
      if not KNOWN[key(p)] then added[#added + 1] = key(p) end
    end
    table.sort(added)
    assert.same({ "c proc -> http", "lua policy -> dispatch", "lua shell -> exec" }, added)
  end)
end)

-- One error shape: no Lua file of the program returns a bare string as its failure, except
-- these, each with why its `nil, text` is not an error value (a reason or a note its caller
-- shows as it is, or a code its caller turns into one error). A file that no longer needs its
-- entry fails the spec (delete the entry). agent/ and dispatch/ have their own rule below (it
-- lets a run's one-word end state pass).
local STRING_ERRORS_ALLOWED = {
  ["fronts/slack/events.lua"] = "why an event is ignored (the log's reason), not a failure",
  ["fronts/slack/review.lua"] = "why a webhook delivery starts no run (the log's reason), not a failure",
  ["policy/cron.lua"] = "why a cron expression is refused (the loader's message for the policy's author), not a failure",
  ["fronts/github/pulls.lua"] = "why a pull request's webhook delivery starts no review (the log's reason), not a failure",
  ["fronts/github/issues.lua"] = "why an issue's webhook delivery starts no run (the log's reason), not a failure",
  ["fronts/slack/context.lua"] = "the note a skipped file or thread history leaves on the card, not a failure",
  ["policy/schema.lua"] = "a validator's complaint, which the loader reports at the field's path",
  ["exec/connect.lua"] = "a Connect envelope's defect, which the decoder turns into its one error",
  ["exec/kubernetes_watch.lua"] = "a watch event's defect, which the decoder turns into its one error",
  ["exec/e2b.lua"] = "confine's code (escape, not_a_file), which fs_error turns into a tool error",
}

describe("one error shape outside the agent's and the dispatcher's rooms", function()
  local function lua_files()
    local out = {}
    local p = io.popen("find lua/switchboard -name '*.lua' | sort")
    for line in p:lines() do
      if not line:find("^lua/switchboard/agent/") and not line:find("^lua/switchboard/dispatch/") then
        out[#out + 1] = line
      end
    end
    p:close()
    return out
  end

  it("no file of the program returns a bare string as its failure, outside the allowlist", function()
    local found, used = {}, {}
    for _, path in ipairs(lua_files()) do
      local rel = path:gsub("^lua/switchboard/", "")
      local hits = layering.string_errors(assert(files.read(path)))
      if #hits > 0 then
        if STRING_ERRORS_ALLOWED[rel] then
          used[rel] = true
        else
          for _, h in ipairs(hits) do found[#found + 1] = ("%s:%d: %s"):format(path, h.line, h.text) end
        end
      end
    end
    assert(#found == 0, "a failure returned as a bare string (return nil, core.error(kind, message) "
      .. "instead, ARCHITECTURE.md \"Failures are values, of one type\"):\n" .. table.concat(found, "\n"))
    for rel in pairs(STRING_ERRORS_ALLOWED) do
      assert(used[rel], ("%s returns no bare string any more: remove it from "
        .. "STRING_ERRORS_ALLOWED in tests/lua/layering_spec.lua"):format(rel))
    end
  end)

  it("the check finds each form of a bare-string failure, and passes error values and comments", function()
    local src = table.concat({
      'local function a() return nil, "plain" end',
      'local function b(x)',
      '  return nil, ("formatted %s"):format(x)',
      'end',
      'local function c(name) return nil, name .. " was not read" end',
      'local function d() return nil, [[long]] end',
      'local function e() return nil, core.error("invalid", "a value") end',
      'local function f(err) return nil, err end',
      '-- return nil, "in a comment"',
      '--[[ return nil, "in a long comment"',
      '  return nil, "still in it" ]]',
      "local function g() return nil,'single' end",
    }, "\n")
    local lines = {}
    for _, h in ipairs(layering.string_errors(src)) do lines[#lines + 1] = h.line end
    assert.same({ 1, 3, 5, 6, 12 }, lines)
  end)
end)

-- One error shape (ARCHITECTURE.md "Failures are values, of one type"): in the agent's and the
-- dispatcher's rooms a failure is a core.error. What the rooms had before it, by line: a
-- message string as the error (`return nil, "a sentence"`: a run's end state is one word and
-- allowed), a string plus a kind (a line ending `…), "kind"`), a plain {kind, message} table.
local ERROR_SHAPES = {
  { pattern = 'return%s+nil%s*,%s*%(?%s*"[^"]*%s', what = "a string as the error (use core.error(kind, message))" },
  { pattern = '%)%s*,%s*"[%w_]+"%s*$', what = "a string plus a kind (use core.error(kind, message))" },
  { pattern = 'return%s+nil%s*,.+,%s*"[%w_]+"%s*$', what = "a string plus a kind (use core.error(kind, message))" },
  { pattern = 'return%s+nil%s*,.+,%s*"[%w_]+"%s+end%s*$', what = "a string plus a kind (use core.error(kind, message))" },
  { pattern = 'kind%s*=%s*"[%w_]+"%s*,%s*message%s*=', what = "a plain {kind, message} table (use core.error)" },
}

local function error_shape_problems(name, text)
  local out, n = {}, 0
  for line in (text .. "\n"):gmatch("([^\n]*)\n") do
    n = n + 1
    if not line:match("^%s*%-%-") then
      for _, s in ipairs(ERROR_SHAPES) do
        if line:find(s.pattern) then out[#out + 1] = ("%s:%d: %s: %s"):format(name, n, s.what, line) end
      end
    end
  end
  return out
end

describe("one error shape", function()
  it("agent/ and dispatch/ return core.error values, never strings, string-plus-kind or plain tables", function()
    local problems = {}
    local p = io.popen("git ls-files -- lua/switchboard/agent lua/switchboard/dispatch 2>/dev/null")
    local n = 0
    for path in p:lines() do
      n = n + 1
      for _, pr in ipairs(error_shape_problems(path, assert(files.read(path)))) do problems[#problems + 1] = pr end
    end
    p:close()
    if n == 0 then pending("not a git checkout") return end
    assert(#problems == 0, "\n" .. table.concat(problems, "\n"))
  end)

  it("the check catches each old shape and lets a state word and core.error pass", function()
    local src = table.concat({
      'if not ok then return nil, "the executor raised: " .. why, "infra" end',
      'if not ok then return nil, problem, "infra" end',
      '  return nil, ("git could not clone %s"):format(repo), "git"',
      'return nil, { kind = "budget", message = "time ran out" }',
      'if not close then return nil, "the block is not closed" end',
      'if err.kind == "aborted" then return nil, "stopped" end',
      'return nil, core.error("git", ("git could not clone %s"):format(repo))',
      '-- return nil, "a comment"',
    }, "\n")
    local lines = {}
    for _, pr in ipairs(error_shape_problems("x.lua", src)) do lines[#lines + 1] = tonumber(pr:match("^x%.lua:(%d+):")) end
    assert.same({ 1, 1, 2, 3, 3, 3, 4, 5 }, lines)
  end)
end)

-- One list of error kinds (lua/switchboard/error_kinds.lua, issue 42): every kind a core.error
-- is made with in the tree is on it, and everything on it is still made somewhere. Where a kind
-- is written: core.error("kind", …) in the program and the policies; exec/errors.lua's
-- new("kind", …); the engine's sb_push_fail / sb_error_push (L, "kind", …) and every string
-- its `kind = …` choices name before one. A comment line does not count.
local KIND_WRITERS = {
  { dirs = "lua policies", ext = "lua", patterns = { 'core%.error%(%s*"([%w_]+)"', 'return new%(%s*"([%w_]+)"' } },
  { dirs = "src", ext = "c", patterns = { 'sb_push_fail%(%s*[%w_]+%s*,%s*"([%w_]+)"', 'sb_error_push%(%s*[%w_]+%s*,%s*"([%w_]+)"' },
    choice = '[^%w_]kind%s*=%s*([^=].*)$' },
}

local function kinds_written(name, text, writer, out)
  local n = 0
  for line in (text .. "\n"):gmatch("([^\n]*)\n") do
    n = n + 1
    local comment = writer.ext == "lua" and line:match("^%s*%-%-") or writer.ext == "c" and line:match("^%s*/?%*")
    if not comment then
      local function add(k) out[#out + 1] = { kind = k, where = ("%s:%d"):format(name, n) } end
      for _, pattern in ipairs(writer.patterns) do
        for k in line:gmatch(pattern) do add(k) end
      end
      local chosen = writer.choice and line:match(writer.choice)
      for k in (chosen or ""):gmatch('"([%w_]+)"') do add(k) end
    end
  end
  return out
end

local function kinds_in_tree(root)
  local out = {}
  for _, w in ipairs(KIND_WRITERS) do
    local p = io.popen(("cd '%s' && find %s -name '*.%s' | sort"):format(root, w.dirs, w.ext))
    for path in p:lines() do kinds_written(path, assert(files.read(root .. "/" .. path)), w, out) end
    p:close()
  end
  return out
end

local function kind_problems(listed, written)
  local problems, seen = {}, {}
  for _, w in ipairs(written) do
    seen[w.kind] = true
    if listed[w.kind] == nil then
      problems[#problems + 1] = ("%s: the error kind %q is not in lua/switchboard/error_kinds.lua"):format(w.where, w.kind)
    end
  end
  local stale = {}
  for k in pairs(listed) do if not seen[k] then stale[#stale + 1] = k end end
  table.sort(stale)
  for _, k in ipairs(stale) do
    problems[#problems + 1] = ("lua/switchboard/error_kinds.lua: %q is made nowhere any more: remove it"):format(k)
  end
  return problems
end

describe("one list of error kinds", function()
  it("every kind the tree makes a core.error with is listed, and every listed kind is made", function()
    local written = kinds_in_tree(".")
    assert.is_true(#written > 100, "the scan found only " .. #written .. " kinds written: is the pattern broken?")
    local problems = kind_problems(require("switchboard.error_kinds"), written)
    assert(#problems == 0, "\n" .. table.concat(problems, "\n"))
  end)

  it("the check names an unknown kind in Lua and C, and a listed kind nothing makes", function()
    local written = {}
    kinds_written("a.lua", 'return nil, core.error("stoped", "a typo")\n-- core.error("commented", "x")', KIND_WRITERS[1], written)
    kinds_written("b.c", 'return sb_push_fail(L, "oops", msg);\n  kind = err == ENOENT ? "not_found" : "weird";', KIND_WRITERS[2], written)
    local problems = kind_problems({ not_found = "x", unused = "y" }, written)
    assert.same({
      'a.lua:1: the error kind "stoped" is not in lua/switchboard/error_kinds.lua',
      'b.c:1: the error kind "oops" is not in lua/switchboard/error_kinds.lua',
      'b.c:2: the error kind "weird" is not in lua/switchboard/error_kinds.lua',
      'lua/switchboard/error_kinds.lua: "unused" is made nowhere any more: remove it',
    }, problems)
  end)
end)

-- One JSON (issue 42): the program reads and writes JSON through core.json only; a module that
-- requires cjson itself brings back a flavour with its own settings.
describe("one JSON", function()
  it("no module of lua/ requires cjson", function()
    local found = {}
    local p = io.popen("grep -rnE \"require[ (]*[\\\"']cjson\" lua || true")
    for line in p:lines() do found[#found + 1] = line end
    p:close()
    assert(#found == 0, "use core.json (docs/engine.md \"JSON\"):\n" .. table.concat(found, "\n"))
  end)
end)
