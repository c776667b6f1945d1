-- Connect envelopes (exec/connect.lua): any split of the bytes decodes to the same frames, and
-- what no honest peer sends is refused.
local connect = require("switchboard.exec.connect")

local function frames_of(chunks, opts)
  local d = connect.decoder(opts)
  local out = {}
  for _, c in ipairs(chunks) do
    local got, err = d:feed(c)
    if not got then return nil, err, d end
    for _, f in ipairs(got) do out[#out + 1] = f end
  end
  return out, nil, d
end

local STREAM = connect.encode(0, '{"event":{"start":{"pid":7}}}')
  .. connect.encode(0, '{"event":{"data":{"stdout":"aGk="}}}')
  .. connect.encode(0, "")
  .. connect.encode(0, '{"event":{"end":{"exited":true,"status":"exit status 0"}}}')
  .. connect.encode(2, "{}")

local function datas(frames)
  local out = {}
  for _, f in ipairs(frames) do out[#out + 1] = f.data end
  return out
end

describe("connect envelopes", function()
  it("encodes 1 flag byte + a 4-byte big-endian length + the payload", function()
    assert.equal("\2\0\0\0\2{}", connect.encode(2, "{}"))
    assert.equal(5 + 300, #connect.encode(0, string.rep("x", 300)))
    assert.equal("\0\0\0\1\44", connect.encode(0, string.rep("x", 300)):sub(1, 5))
  end)

  it("decodes the same frames from every two-way and every byte-by-byte split", function()
    local whole = assert(frames_of({ STREAM }))
    assert.equal(5, #whole)
    assert.is_true(whole[5].end_stream)
    assert.equal("", whole[3].data)
    for cut = 1, #STREAM - 1 do
      local got = assert(frames_of({ STREAM:sub(1, cut), STREAM:sub(cut + 1) }))
      assert.same(datas(whole), datas(got))
    end
    local bytes = {}
    for i = 1, #STREAM do bytes[i] = STREAM:sub(i, i) end
    local got, _, d = frames_of(bytes)
    assert.same(datas(whole), datas(got))
    assert.equal(0, d:partial())
    assert.is_true(d.ended)
  end)

  it("says how much of an unfinished frame is waiting", function()
    local _, _, d = frames_of({ STREAM:sub(1, 3) })
    assert.equal(3, d:partial())
    _, _, d = frames_of({ STREAM:sub(1, 9) })
    assert.equal(9, d:partial())
  end)

  it("refuses unknown flags, a compressed message, an over-long one and bytes after the end", function()
    local got, err = frames_of({ connect.encode(4, "{}") })
    assert.is_nil(got); assert.matches("unknown envelope flags 0x04", err)
    got, err = frames_of({ connect.encode(1, "{}") })
    assert.is_nil(got); assert.matches("compressed", err)
    -- the limit is checked on the header, before the payload is buffered
    got, err = frames_of({ ("\0\0\1\0\0") }, { max_message = 1024 })
    assert.is_nil(got); assert.matches("65536%-byte message, over the 1024%-byte limit", err)
    got, err = frames_of({ connect.encode(2, "{}") .. "x" })
    assert.is_nil(got); assert.matches("after the end%-of%-stream", err)
    got, err = frames_of({ connect.encode(2, "{}"), "x" })
    assert.is_nil(got); assert.matches("after the end%-of%-stream", err)
  end)

  it("keeps refusing after the first error", function()
    local d = connect.decoder()
    assert.is_nil(d:feed("\9\0\0\0\0"))
    local got, err = d:feed(connect.encode(0, "{}"))
    assert.is_nil(got)
    assert.matches("unknown envelope flags", err)
  end)

  it("copies a long message arriving in small pieces once, not once a piece", function()
    local big = connect.encode(0, string.rep("y", 1 << 20))
    local d = connect.decoder()
    local n, k = 0, 0
    for i = 1, #big, 1000 do
      local got = assert(d:feed(big:sub(i, i + 999)))
      n, k = n + #got, k + 1
      -- until the last piece the pieces are kept as they came, not joined into a growing copy
      if i + 999 < #big then assert.equal(k, #d.chunks) end
    end
    assert.equal(1, n)
  end)
end)
