-- core.crypto's AES-256-GCM (repository secrets at rest, docs/secrets.md) against the known-answer
-- vectors of the GCM specification (McGrew & Viega, "The Galois/Counter Mode of Operation",
-- test cases 13–16: the AES-256 ones, also in NIST's gcmEncryptExtIV256 set).
package.cpath = (os.getenv("SB_BUILD_DIR") or "./build") .. "/lua/?.so;" .. package.cpath
local core = require("switchboard.core")
local crypto = core.crypto

local function unhex(s)
  return (s:gsub("%s", ""):gsub("..", function(h) return string.char(tonumber(h, 16)) end))
end

local K16 = unhex("feffe9928665731c6d6a8f9467308308feffe9928665731c6d6a8f9467308308")
local IV16 = unhex("cafebabefacedbaddecaf888")
local P16 = unhex([[d9313225f88406e5a55909c5aff5269a86a7a9531534f7da2e4c303d8a318a72
                   1c3c0c95956809532fcf0e2449a6b525b16aedf5aa0de657ba637b39]])
local A16 = unhex("feedfacedeadbeeffeedfacedeadbeefabaddad2")
local C16 = [[522dc1f099567d07f47f37a32a84427d643a8cdcbfe5c0c97598a2bd2555d1aa
              8cb08e48590dbb3da7b08b1056828838c5f61e6393ba7a0abcc9f662]]
local T16 = "76fc6ece0f4e1768cddf8853bb2d551b"

local VECTORS = {
  { name = "test case 13 (empty)", key = string.rep("\0", 32), iv = string.rep("\0", 12), p = "", a = "",
    sealed = "530f8afbc74536b9a963b4f1c4cb738b" },
  { name = "test case 14 (one zero block)", key = string.rep("\0", 32), iv = string.rep("\0", 12),
    p = string.rep("\0", 16), a = "",
    sealed = "cea7403d4d606b6e074ec5d3baf39d18" .. "d0d1c8a799996bf0265b98b5d48ab919" },
  { name = "test case 16 (with associated data)", key = K16, iv = IV16, p = P16, a = A16,
    sealed = C16:gsub("%s", "") .. T16 },
}

describe("core.crypto AES-256-GCM", function()
  for _, v in ipairs(VECTORS) do
    it("seals and opens " .. v.name, function()
      local sealed = crypto.aes256gcm_seal(v.key, v.iv, v.p, v.a)
      assert.are.equal(v.sealed, crypto.hex(sealed))
      assert.are.equal(v.p, crypto.aes256gcm_open(v.key, v.iv, sealed, v.a))
    end)
  end

  it("refuses a sealed value whose tag, text, associated data or key changed", function()
    local sealed = crypto.aes256gcm_seal(K16, IV16, P16, A16)
    local function flip(s, i) return s:sub(1, i - 1) .. string.char(s:byte(i) ~ 1) .. s:sub(i + 1) end
    for _, case in ipairs({
      { K16, IV16, flip(sealed, #sealed), A16 },       -- the tag
      { K16, IV16, flip(sealed, 1), A16 },             -- the ciphertext
      { K16, IV16, sealed, A16 .. "x" },               -- the repository/name it was sealed for
      { flip(K16, 5), IV16, sealed, A16 },             -- the key
      { K16, flip(IV16, 1), sealed, A16 },             -- the nonce
      { K16, IV16, sealed:sub(1, 15), A16 },           -- shorter than a tag
    }) do
      local p, err = crypto.aes256gcm_open(table.unpack(case))
      assert.is_nil(p)
      assert.are.equal("crypto", err.kind)
      assert.not_matches(crypto.hex(P16):sub(1, 8), tostring(err), 1, true)
    end
  end)

  it("raises on a key or nonce of the wrong size (a programmer error)", function()
    assert.has_error(function() crypto.aes256gcm_seal(string.rep("k", 16), IV16, "x") end)
    assert.has_error(function() crypto.aes256gcm_seal(K16, string.rep("n", 16), "x") end)
    assert.has_error(function() crypto.aes256gcm_open(K16, "short", string.rep("x", 20)) end)
  end)
end)
