-- core.crypto against known-answer vectors and against the openssl command line as referee.
package.cpath = (os.getenv("SB_BUILD_DIR") or "./build") .. "/lua/?.so;" .. package.cpath
local core = require("switchboard.core")
local crypto = core.crypto

local function unhex(s)
  return (s:gsub("..", function(h) return string.char(tonumber(h, 16)) end))
end

local function sh(cmd)
  local p = assert(io.popen(cmd .. " 2>&1"))
  local out = p:read("a")
  local ok, _, code = p:close()
  return out, ok and 0 or code
end

local function write(path, bytes)
  local f = assert(io.open(path, "wb"))
  f:write(bytes)
  f:close()
end

local function read(path)
  local f = assert(io.open(path, "rb"))
  local s = f:read("a")
  f:close()
  return s
end

local function tmpdir() return require("support.tmp").dir("crypto") end

describe("core.crypto hashes", function()
  it("sha256 matches the FIPS 180-2 vectors", function()
    assert.are.equal(32, #crypto.sha256("abc"))
    assert.are.equal("ba7816bf8f01cfea414140de5dae2223b00361a396177a9cb410ff61f20015ad",
      crypto.hex(crypto.sha256("abc")))
    assert.are.equal("e3b0c44298fc1c149afbf4c8996fb92427ae41e4649b934ca495991b7852b855",
      crypto.hex(crypto.sha256("")))
    assert.are.equal("248d6a61d20638b8e5c026930c3e6039a33ce45964ff2167f6ecedd419db06c1",
      crypto.hex(crypto.sha256("abcdbcdecdefdefgefghfghighijhijkijkljklmklmnlmnomnopnopq")))
  end)

  it("hmac_sha256 matches RFC 4231 test cases 1, 2 and 6", function()
    assert.are.equal("b0344c61d8db38535ca8afceaf0bf12b881dc200c9833da726e9376c2e32cff7",
      crypto.hex(crypto.hmac_sha256(string.rep("\x0b", 20), "Hi There")))
    assert.are.equal("5bdcc146bf60754e6a042426089575c75a003f089d2739839dec58b964ec3843",
      crypto.hex(crypto.hmac_sha256("Jefe", "what do ya want for nothing?")))
    -- case 6: a key longer than the block size is hashed first
    assert.are.equal("60e431591ee0b67f0d8a26aacbf5b77f8e0bc6213728c5140546040f0ee37f54",
      crypto.hex(crypto.hmac_sha256(string.rep("\xaa", 131),
        "Test Using Larger Than Block-Size Key - Hash Key First")))
  end)

  it("hmac_sha256 agrees with openssl for binary keys and data, and allows an empty key", function()
    local dir = tmpdir()
    local key, data = "k\0e\255y", "da\0ta\n" .. string.rep("x", 1000)
    write(dir .. "/data", data)
    local out = sh(("openssl dgst -sha256 -mac HMAC -macopt hexkey:%s -r %s/data")
      :format(crypto.hex(key), dir))
    assert.are.equal(out:match("^(%x+)"), crypto.hex(crypto.hmac_sha256(key, data)))
    assert.are.equal("b613679a0814d9ec772f95d778c35fc5ff1697c493715653c6c712144292c5ad",
      crypto.hex(crypto.hmac_sha256("", "")))
    os.execute("rm -rf " .. dir)
  end)

  it("hex is lowercase and binary safe", function()
    assert.are.equal("0001feff0a", crypto.hex("\0\1\254\255\n"))
    assert.are.equal("", crypto.hex(""))
  end)

  it("raises on a wrong argument type (a programmer error)", function()
    assert.has_error(function() crypto.sha256(nil) end)
    assert.has_error(function() crypto.hmac_sha256("k") end)
  end)
end)

describe("core.crypto.ct_equal", function()
  it("is true for equal strings and false otherwise, whatever the lengths", function()
    local token = "xoxb-" .. crypto.hex(crypto.random_bytes(24))
    assert.is_true(crypto.ct_equal(token, token .. ""))
    assert.is_true(crypto.ct_equal("", ""))
    assert.is_false(crypto.ct_equal(token, token:sub(1, -2)))
    assert.is_false(crypto.ct_equal(token:sub(1, -2), token))
    assert.is_false(crypto.ct_equal(token, "y" .. token:sub(2)))
    assert.is_false(crypto.ct_equal(token, token:sub(1, -2) .. "!"))
    assert.is_false(crypto.ct_equal("abc", "abc\0"))
    assert.is_false(crypto.ct_equal("", "a"))
  end)

  it("compares HMAC signatures the way the Slack front will", function()
    local secret, body = "8f742231b10e8888abcd99yyyzzz85a5", "token=x&team_id=T1"
    local sig = "v0=" .. crypto.hex(crypto.hmac_sha256(secret, "v0:1531420618:" .. body))
    local again = "v0=" .. crypto.hex(crypto.hmac_sha256(secret, "v0:1531420618:" .. body))
    local forged = "v0=" .. crypto.hex(crypto.hmac_sha256(secret, "v0:1531420619:" .. body))
    assert.is_true(crypto.ct_equal(sig, again))
    assert.is_false(crypto.ct_equal(sig, forged))
  end)
end)

describe("core.crypto.random_bytes", function()
  it("returns n bytes that differ between calls", function()
    local a, b = crypto.random_bytes(32), crypto.random_bytes(32)
    assert.are.equal(32, #a)
    assert.are_not.equal(a, b)
    assert.are.equal("", crypto.random_bytes(0))
  end)

  it("raises on a count that is not a byte count", function()
    assert.has_error(function() crypto.random_bytes(-1) end)
    assert.has_error(function() crypto.random_bytes(1 << 30) end)
    assert.has_error(function() crypto.random_bytes("x") end)
  end)
end)

describe("core.crypto base64", function()
  local vectors = {
    {"", "", ""}, {"f", "Zg==", "Zg"}, {"fo", "Zm8=", "Zm8"}, {"foo", "Zm9v", "Zm9v"},
    {"foob", "Zm9vYg==", "Zm9vYg"}, {"fooba", "Zm9vYmE=", "Zm9vYmE"},
    {"foobar", "Zm9vYmFy", "Zm9vYmFy"},
  }

  it("matches the RFC 4648 section 10 vectors both ways", function()
    for _, v in ipairs(vectors) do
      assert.are.equal(v[2], crypto.base64_encode(v[1]))
      assert.are.equal(v[1], crypto.base64_decode(v[2]))
      assert.are.equal(v[3], crypto.base64url_encode(v[1]))
      assert.are.equal(v[1], crypto.base64url_decode(v[3]))
    end
  end)

  it("round-trips every byte value, NULs included, and uses - and _ in base64url", function()
    local all = {}
    for i = 0, 255 do all[#all + 1] = string.char(i) end
    local bytes = table.concat(all) .. "\0\0\0"
    assert.are.equal(bytes, crypto.base64_decode(crypto.base64_encode(bytes)))
    assert.are.equal(bytes, crypto.base64url_decode(crypto.base64url_encode(bytes)))
    assert.are.equal("+/+/", crypto.base64_encode("\xfb\xff\xbf"))
    assert.are.equal("-_-_", crypto.base64url_encode("\xfb\xff\xbf"))
    -- openssl as a referee for the standard alphabet
    local dir = tmpdir()
    write(dir .. "/bytes", bytes)
    local out = sh("openssl base64 -A -in " .. dir .. "/bytes")
    assert.are.equal(out, crypto.base64_encode(bytes))
    os.execute("rm -rf " .. dir)
  end)

  it("refuses invalid input with nil, err and tolerates no garbage", function()
    for _, bad in ipairs({"Zg", "Zg=", "Z===", "=Zg=", "Zg==Zg==", "Zm9v\n", " Zm9v",
                          "Zm9v YmFy", "Zm-v", "Zh==", "Zm9v\0\0\0\0", "Zm9v!!!!"}) do
      local bytes, err = crypto.base64_decode(bad)
      assert.is_nil(bytes, bad)
      assert.are.equal("invalid", err.kind)
      assert.matches("invalid base64 at byte %d+", err.message)
    end
    for _, bad in ipairs({"Z", "Zm+v", "Zm/v", "Zg=", "Zh"}) do
      local bytes, err = crypto.base64url_decode(bad)
      assert.is_nil(bytes, bad)
      assert.are.equal("invalid", err.kind)
    end
  end)
end)

describe("core.crypto RS256", function()
  local priv, pub, dir
  setup(function()
    priv, pub = crypto.rsa_generate(2048)
    dir = tmpdir()
    write(dir .. "/priv.pem", priv)
    write(dir .. "/pub.pem", pub)
  end)
  teardown(function()
    os.execute("rm -rf " .. dir)
  end)

  local function jwt_input()
    local header = crypto.base64url_encode('{"alg":"RS256","typ":"JWT"}')
    local payload = crypto.base64url_encode('{"iat":1700000000,"exp":1700000600,"iss":"12345"}')
    return header .. "." .. payload
  end

  it("generates a PKCS#8 private key and a SubjectPublicKeyInfo public key", function()
    assert.matches("^%-%-%-%-%-BEGIN PRIVATE KEY%-%-%-%-%-\n", priv)
    assert.matches("^%-%-%-%-%-BEGIN PUBLIC KEY%-%-%-%-%-\n", pub)
    local out, code = sh("openssl pkey -in " .. dir .. "/priv.pem -noout -text")
    assert.are.equal(0, code, out)
    assert.matches("2048 bit", out)
  end)

  it("signs, verifies its own signature and refuses a tampered one", function()
    local input = jwt_input()
    local sig = assert(crypto.rs256_sign(priv, input))
    assert.are.equal(256, #sig)
    assert.is_true(crypto.rs256_verify(pub, input, sig))
    assert.is_false(crypto.rs256_verify(pub, input .. "x", sig))
    local flipped = string.char(sig:byte(1) ~ 1) .. sig:sub(2)
    assert.is_false(crypto.rs256_verify(pub, input, flipped))
    assert.is_false(crypto.rs256_verify(pub, input, sig:sub(1, 100)))
    local _, other_pub = crypto.rsa_generate(2048)
    assert.is_false(crypto.rs256_verify(other_pub, input, sig))
  end)

  it("produces a signature `openssl dgst -sha256 -verify` accepts, byte-identical to openssl's", function()
    local input = jwt_input()
    local sig = assert(crypto.rs256_sign(priv, input))
    write(dir .. "/input", input)
    write(dir .. "/sig", sig)
    local out, code = sh(("openssl dgst -sha256 -verify %s/pub.pem -signature %s/sig %s/input")
      :format(dir, dir, dir))
    assert.are.equal(0, code, out)
    assert.matches("Verified OK", out)
    -- and the referee refuses it for other bytes, so the check above can fail
    write(dir .. "/other", input .. "!")
    out, code = sh(("openssl dgst -sha256 -verify %s/pub.pem -signature %s/sig %s/other")
      :format(dir, dir, dir))
    assert.are_not.equal(0, code)
    -- PKCS#1 v1.5 is deterministic: openssl's own signature is the same bytes
    sh(("openssl dgst -sha256 -sign %s/priv.pem -out %s/osig %s/input"):format(dir, dir, dir))
    assert.are.equal(read(dir .. "/osig"), sig)
    -- and ours verifies openssl's
    assert.is_true(crypto.rs256_verify(pub, input, read(dir .. "/osig")))
  end)

  it("accepts the PKCS#1 (BEGIN RSA PRIVATE KEY) form of the same key", function()
    local out, code = sh(("openssl pkey -in %s/priv.pem -traditional -out %s/rsa.pem")
      :format(dir, dir))
    assert.are.equal(0, code, out)
    local pkcs1 = read(dir .. "/rsa.pem")
    assert.matches("^%-%-%-%-%-BEGIN RSA PRIVATE KEY%-%-%-%-%-\n", pkcs1)
    local input = jwt_input()
    assert.are.equal(crypto.rs256_sign(priv, input), crypto.rs256_sign(pkcs1, input))
  end)

  it("verifies with a PKCS#1 (BEGIN RSA PUBLIC KEY) public key too", function()
    local out, code = sh(("openssl rsa -in %s/priv.pem -RSAPublicKey_out -out %s/rsapub.pem")
      :format(dir, dir))
    assert.are.equal(0, code, out)
    local rsapub = read(dir .. "/rsapub.pem")
    assert.matches("BEGIN RSA PUBLIC KEY", rsapub)
    local input = jwt_input()
    assert.is_true(crypto.rs256_verify(rsapub, input, crypto.rs256_sign(priv, input)))
  end)

  -- Every 12-character run of the PEM's base64 body: none may appear in a message.
  local function assert_no_key_text(message, pem)
    for line in pem:gmatch("[^\n]+") do
      if not line:match("^%-%-%-%-%-") then
        for i = 1, #line - 11, 6 do
          local piece = line:sub(i, i + 11)
          assert.is_nil(message:find(piece, 1, true), "the message quotes the key: " .. piece)
        end
      end
    end
  end

  it("fails on a bad PEM with nil, {kind='crypto'} whose message does not contain the key", function()
    local lines = {}
    for line in priv:gmatch("[^\n]+") do lines[#lines + 1] = line end
    local truncated = table.concat(lines, "\n", 1, #lines // 2) .. "\n" .. lines[#lines] .. "\n"
    local corrupted = priv:gsub("A", "*", 1)
    local cases = {truncated, corrupted, "not a key at all", "",
                   (priv:gsub("PRIVATE KEY", "CERTIFICATE")), pub}
    for i, pem in ipairs(cases) do
      local sig, err = crypto.rs256_sign(pem, "data")
      assert.is_nil(sig, "case " .. i)
      assert.are.equal("crypto", err.kind)
      assert.matches("rs256_sign", err.message)
      assert_no_key_text(err.message, priv)
    end
  end)

  it("refuses an encrypted key without prompting, and a key that is not RSA", function()
    local out, code = sh(("openssl pkey -in %s/priv.pem -aes256 -passout pass:secret -out %s/enc.pem < /dev/null")
      :format(dir, dir))
    assert.are.equal(0, code, out)
    local sig, err = crypto.rs256_sign(read(dir .. "/enc.pem"), "data")
    assert.is_nil(sig)
    assert.are.equal("crypto", err.kind)
    assert_no_key_text(err.message, read(dir .. "/enc.pem"))
    out, code = sh(("openssl genpkey -algorithm EC -pkeyopt ec_paramgen_curve:P-256 -out %s/ec.pem")
      :format(dir))
    assert.are.equal(0, code, out)
    sig, err = crypto.rs256_sign(read(dir .. "/ec.pem"), "data")
    assert.is_nil(sig)
    assert.matches("not an RSA key", err.message)
  end)

  it("rs256_verify fails with nil, err on an unreadable public key", function()
    local ok, err = crypto.rs256_verify("garbage", "data", "sig")
    assert.is_nil(ok)
    assert.are.equal("crypto", err.kind)
  end)

  it("rsa_generate raises on an unreasonable size", function()
    assert.has_error(function() crypto.rsa_generate(512) end)
    assert.has_error(function() crypto.rsa_generate(1 << 20) end)
  end)
end)
