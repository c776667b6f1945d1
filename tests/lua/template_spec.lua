-- template.fill and rule.trim are on every decision's path and are written for speed (a
-- template is split once and cached; trim skips the pattern work when there is nothing to cut).
-- Each must answer exactly what the plain gsub version answers.
local template = require("switchboard.policy.template")
local rule = require("switchboard.policy.rule")

local function plain_fill(text, vars)
  return (text:gsub("{([%w_]+)}", function(name)
    local v = vars[name]
    if v == nil then return nil end
    return tostring(v)
  end))
end

local function plain_trim(s)
  return (s:gsub("^%s+", ""):gsub("%s+$", ""))
end

describe("template.fill", function()
  local vars = { a = "A", seconds = 95, ratio = 1.5, yes = true, empty = "", pct = "100%", brace = "{a}" }

  it("fills placeholders and leaves unknown ones as written", function()
    assert.equal("after 95s (A)", template.fill("after {seconds}s ({a})", vars))
    assert.equal("{missing} and A", template.fill("{missing} and {a}", vars))
    assert.equal("no placeholders", template.fill("no placeholders", vars))
    assert.equal("", template.fill("", vars))
    assert.equal("true 1.5 100% {a}", template.fill("{yes} {ratio} {pct} {brace}", vars)) -- no second pass
  end)

  it("answers what the gsub version answers, for odd texts and after the cache is full", function()
    local texts = {
      "{a}", "{a}{a}", "x{a}y{seconds}z", "{{a}}", "{a", "a}", "{}", "{ a }", "{a-b}", "{empty}|",
      "{%a}", "%s {a} %1", "é {a} ü", "{A}", "{_}", "{a}\0{seconds}", "trailing {", "{seconds}{missing}{a}",
    }
    for _, t in ipairs(texts) do
      assert.equal(plain_fill(t, vars), template.fill(t, vars), t)
      assert.equal(plain_fill(t, vars), template.fill(t, vars), t .. " (cached)")
    end
    for i = 1, 1500 do -- past the cache bound: it is dropped and rebuilt, answers unchanged
      local t = ("n%d {a} {missing} {seconds}"):format(i)
      assert.equal(plain_fill(t, vars), template.fill(t, vars))
    end
    for _, t in ipairs(texts) do assert.equal(plain_fill(t, vars), template.fill(t, vars), t) end
    -- the same text with other values
    assert.equal("after 1s (B)", template.fill("after {seconds}s ({a})", { seconds = 1, a = "B" }))
  end)
end)

describe("rule.trim", function()
  it("answers what the two gsubs answer", function()
    for _, s in ipairs({ "", " ", "\t\n", "x", " x", "x ", " x ", "\r\nx y\v\f", "x\0 ", "\0", "  a  b  ",
                         ("ab"):rep(50), (" "):rep(40) .. "z" }) do
      assert.equal(plain_trim(s), rule.trim(s), ("%q"):format(s))
    end
  end)
end)
