-- Command output on the wire (shell/wire_text.lua): valid UTF-8 goes as it is; anything else as a
-- lossy text plus the exact bytes in base64, which the executor puts back.
local cjson = require("cjson")
local text = require("switchboard.shell.wire_text")

describe("sandboxd wire text", function()
  it("tells valid UTF-8 from everything else", function()
    for _, s in ipairs({ "", "plain", "héllo", "\u{10FFFF}", "日本" }) do assert.is_true(text.valid(s), s) end
    for _, s in ipairs({ "\255", "a\254b", "\192\128", "\237\160\128", "\244\144\128\128", "\226\130" }) do
      assert.is_false(text.valid(s), s)
    end
  end)

  it("replaces every invalid byte with U+FFFD and keeps the rest", function()
    assert.equal("a\u{FFFD}\u{FFFD}b", text.lossy("a\255\254b"))
    assert.equal("é\u{FFFD}", text.lossy("é\195"))
    assert.equal("\u{FFFD}\u{FFFD}", text.lossy("\192\128")) -- an overlong form is two bad bytes
    assert.is_true(text.valid(text.lossy("\0\255\128abc\240")))
  end)

  it("round-trips any bytes through JSON that a strict decoder accepts", function()
    local all = {}
    for b = 0, 255 do all[#all + 1] = string.char(b) end
    local raw = table.concat(all)
    local doc = text.encode({ stdout = raw, stderr = "fine\n", exitCode = 0 })
    local wire = cjson.encode(doc)
    assert.truthy(utf8.len(wire))
    assert.is_nil(doc.stderrBase64)
    local back = text.decode(cjson.decode(wire))
    assert.equal(raw, back.stdout)
    assert.equal("fine\n", back.stderr)
  end)

  it("an answer without the base64 fields is left alone, and bad base64 is ignored", function()
    assert.same({ stdout = "x" }, text.decode({ stdout = "x" }))
    assert.same({ stdout = "x", stdoutBase64 = "%%%" }, text.decode({ stdout = "x", stdoutBase64 = "%%%" }))
  end)
  it("answer_json (C, one pass) says what the Lua encoding says, byte for byte once decoded", function()
    local core = require("switchboard.core")
    math.randomseed(28)
    local pieces = { "a", "é", "日", "\u{10FFFF}", "\"", "\\", "\n", "\0", "\127", "\255", "\192\128",
      "\237\160\128", "\244\144\128\128", "\226\130", "\240", "/", "\t" }
    for _ = 1, 2000 do
      local parts = {}
      for k = 1, math.random(0, 12) do parts[k] = pieces[math.random(#pieces)] end
      for k = #parts + 1, #parts + math.random(0, 3) do parts[k] = string.char(math.random(0, 255)) end
      local s = table.concat(parts)
      local _, valid = core.json_string(s)
      assert.equal(text.valid(s), valid, ("%q"):format(s))
      local doc = { stdout = s, stderr = s:reverse(), exitCode = 3, durationMs = 7 }
      local fast = text.answer_json({ stdout = doc.stdout, stderr = doc.stderr, exitCode = 3, durationMs = 7 }, cjson)
      local slow = cjson.encode(text.encode(doc))
      assert.truthy(utf8.len(fast), ("%q"):format(fast))
      assert.same(cjson.decode(slow), cjson.decode(fast))
      assert.equal(s, text.decode(cjson.decode(fast)).stdout)
    end
    -- a failure document keeps the generic path
    local failure = { error = "x", stdout = "", stderr = "x", exitCode = 127 }
    assert.same(failure, cjson.decode(text.answer_json(failure, cjson)))
  end)

  it("the document after a streamed stdout completes it to the whole document (the exec lane)", function()
    local core = require("switchboard.core")
    math.randomseed(43)
    local pieces = { "a", "é", "\"", "\n", "\0", "\255", "\226\130", "日" }
    local function bytes()
      local parts = {}
      for k = 1, math.random(0, 8) do parts[k] = pieces[math.random(#pieces)] end
      return table.concat(parts)
    end
    -- what the lane wrote: {"stdout":" + stdout's literal inside its quotes + "
    local function streamed_text(doc)
      local literal, valid = core.json_string(doc.stdout)
      return '{"stdout":' .. literal .. table.concat(text.answer_tail_parts(doc, cjson, valid)), valid
    end
    for _ = 1, 500 do
      local success = { stdout = bytes(), stderr = bytes(), exitCode = 124, durationMs = 9 }
      local failure = { error = "killed", reason = "stopped", stdout = bytes(), stderr = bytes(), exitCode = 127 }
      local noted = { stdout = bytes(), stderr = "", exitCode = 0, durationMs = 1, workspace = { state = "kept" } }
      for _, doc in ipairs({ success, failure, noted }) do
        -- (answer_json encodes a failure document's streams in place: it gets a copy)
        local copy = {}
        for k, v in pairs(doc) do copy[k] = v end
        local whole = cjson.decode(text.answer_json(copy, cjson))
        local wire = streamed_text(doc)
        assert.truthy(utf8.len(wire), ("%q"):format(wire))
        assert.same(whole, cjson.decode(wire))
        assert.equal(doc.stdout, text.decode(cjson.decode(wire)).stdout)
      end
    end
  end)
end)
