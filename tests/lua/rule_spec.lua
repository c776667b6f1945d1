local rule = require("switchboard.policy.rule")

describe("rule", function()
  it("texts are plain substrings in any case — pattern characters are literal", function()
    local r = assert(rule.new { texts = { "exit (code: 1)." }, matches = { "x" }, rejects = { "y" } })
    assert.is_true(r:match_text("Session EXIT (CODE: 1). done"))
    assert.is_false(r:match_text("exit code: 1x"))
  end)

  it("patterns are Lua patterns, case-sensitive", function()
    local r = assert(rule.new { patterns = { "Session '[^']*' gone" }, matches = { "x" }, rejects = { "y" } })
    assert.is_true(r:match_text("Session 'a b' gone"))
    assert.is_false(r:match_text("session 'a' gone"))
  end)

  it("names and codes compare exactly", function()
    local r = assert(rule.new { names = { "BusyError" }, codes = { "BUSY" }, matches = { "x" }, rejects = { "y" } })
    assert.is_true(r:match({ name = "BusyError" }))
    assert.is_true(r:match({ code = "BUSY" }))
    assert.is_false(r:match({ name = "busyerror" }))
    assert.is_false(r:match({ name = "BusyErrorX" }))
    assert.is_false(r:match("BusyError"))
  end)

  it("refuses unknown fields, missing examples, empty strings and bad patterns", function()
    local _, errs = rule.new { text = { "x" }, matches = { "x" }, rejects = { "y" } }
    assert.matches("unknown field text", errs[1])
    _, errs = rule.new { texts = { "x" } }
    assert.same({ "matches must list at least one example", "rejects must list at least one example" }, errs)
    _, errs = rule.new { texts = { "" }, matches = { "x" }, rejects = { "y" } }
    assert.matches("texts%[1%] must be a non%-empty string", errs[1])
    _, errs = rule.new { patterns = { "(" }, matches = { "x" }, rejects = { "y" } }
    assert.matches("patterns%[1%] is not a valid Lua pattern", errs[1])
    _, errs = rule.new { matches = { "x" }, rejects = { { nom = "x" } } }
    assert.truthy(table.concat(errs, "\n"):find("unknown field nom", 1, true))
    assert.truthy(table.concat(errs, "\n"):find("needs at least one of names", 1, true))
  end)

  it("check_examples reports every example that fails, and counts them all", function()
    local r = assert(rule.new { texts = { "busy" }, matches = { "busy now", "free" }, rejects = { "idle", "so busy" } })
    local failures, n = r:check_examples()
    assert.equal(4, n)
    assert.same({ 'matches[2] "free" is not matched by the rule', 'rejects[2] "so busy" is matched by the rule' }, failures)
  end)

  it("rebuild compiles a refined rule", function()
    local r = assert(rule.new { texts = { "busy" }, matches = { "busy" }, rejects = { "idle" } })
    table.insert(r.texts, "Full")
    assert.is_false(r:match_text("fleet full"))
    local again = assert(rule.rebuild(r))
    assert.is_true(again:match_text("fleet FULL"))
  end)
end)
