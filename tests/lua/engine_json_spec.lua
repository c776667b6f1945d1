-- core.json (docs/engine.md "JSON", issue 42): one lua-cjson instance for the whole program.
-- A decode of bytes that are not JSON is a failure value, never a raise; the instance is strict
-- and its settings are its own.
local core = require("switchboard.core")

describe("core.json", function()
  it("decodes JSON, null as core.json.null, every number a float", function()
    local doc = core.json.decode('{"a":[1,2.5,null],"b":"x"}')
    assert.equal(1.0, doc.a[1])
    assert.equal("float", math.type(doc.a[1]))
    assert.equal(2.5, doc.a[2])
    assert.equal(core.json.null, doc.a[3])
    assert.equal("x", doc.b)
  end)

  it("answers nil and an invalid error for what is not JSON, without raising", function()
    for _, text in ipairs({ "", "{", '{"a":', "[1,]", "nul", '{"a" 1}', "\255" }) do
      local ok, v, err = pcall(core.json.decode, text)
      assert.is_true(ok, ("raised on %q: %s"):format(text, tostring(v)))
      assert.is_nil(v, text)
      assert.is_true(core.is_error(err), text)
      assert.equal("invalid", err.kind)
      assert.truthy(err.message:find("^invalid JSON: "), err.message)
    end
  end)

  it("is strict: NaN, Infinity and hex numbers are not JSON, and nesting stops at 1,000", function()
    for _, text in ipairs({ "NaN", "[Infinity]", "-Infinity", "0x10", '{"n":nan}' }) do
      local v, err = core.json.decode(text)
      assert.is_nil(v, text)
      assert.equal("invalid", err.kind, text)
    end
    assert.is_table(core.json.decode(("["):rep(1000) .. ("]"):rep(1000)))
    local v, err = core.json.decode(("["):rep(1001) .. ("]"):rep(1001))
    assert.is_nil(v)
    assert.equal("invalid", err.kind)
  end)

  it("raises on a decode of what is not text (a programmer error)", function()
    assert.has_error(function() core.json.decode(nil) end)
    assert.has_error(function() core.json.decode({}) end)
  end)

  it("encodes, and raises on a value that is no JSON", function()
    assert.equal('{"a":[1,"x",null]}', core.json.encode({ a = { 1, "x", core.json.null } }))
    assert.equal("{}", core.json.encode({}))
    assert.has_error(function() core.json.encode({ f = print }) end)
    assert.has_error(function() core.json.encode(0 / 0) end)
  end)

  it("keeps its settings to itself: a plain require of cjson keeps lua-cjson's defaults", function()
    local plain = require("cjson").decode("NaN")
    assert.is_true(plain ~= plain, "lua-cjson's default reads NaN")
    assert.is_nil((core.json.decode("NaN")))
  end)
end)
