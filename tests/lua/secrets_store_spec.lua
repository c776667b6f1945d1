-- store/secrets.lua (docs/secrets.md): the sealed file, the key file's checks, names, and the
-- forms a value is redacted in.
package.cpath = (os.getenv("SB_BUILD_DIR") or "./build") .. "/lua/?.so;" .. package.cpath
local core = require("switchboard.core")
local secrets = require("switchboard.store.secrets")
local files = require("support.files")
local cjson = require("cjson")

local function write(path, bytes, mode)
  local f = assert(io.open(path, "wb"))
  f:write(bytes)
  f:close()
  os.execute(("chmod %s '%s'"):format(mode or "600", path))
end

local function mode_of(path)
  local p = io.popen("stat -c %a '" .. path .. "'")
  local m = p:read("l")
  p:close()
  return m
end

describe("repository secrets at rest", function()
  local dir, key

  before_each(function()
    dir = files.tmpdir()
    key = core.crypto.random_bytes(32)
    write(dir .. "/key", key)
  end)
  after_each(function() os.execute("rm -rf '" .. dir .. "'") end)

  it("reads a raw or hex key and refuses one others can read, saying why", function()
    assert.are.equal(key, secrets.load_key(dir .. "/key"))
    write(dir .. "/hexkey", core.crypto.hex(key) .. "\n")
    assert.are.equal(key, secrets.load_key(dir .. "/hexkey"))
    write(dir .. "/open", key, "640")
    local k, err = secrets.load_key(dir .. "/open")
    assert.is_nil(k)
    assert.matches("readable or writable by group or others (mode 640); chmod 600 it", tostring(err), 1, true)
    write(dir .. "/short", "0123456789")
    k, err = secrets.load_key(dir .. "/short")
    assert.is_nil(k)
    assert.matches("32 raw bytes or 64 hex digits (got 10 bytes)", tostring(err), 1, true)
    assert.is_nil((secrets.load_key(dir .. "/none")))
  end)

  it("seals each value under its repository and name, in a 0600 file that holds neither it nor its base64", function()
    local value = "s3cr3t-" .. core.crypto.hex(core.crypto.random_bytes(12))
    local store = assert(secrets.open(dir .. "/st/secrets.json", key))
    assert(store:set("acme/api", "DEPLOY_KEY", value))
    assert(store:set("acme/api", "NPM_TOKEN", value .. "-npm"))
    assert.are.equal("600", mode_of(dir .. "/st/secrets.json"))
    local text = files.read(dir .. "/st/secrets.json")
    for _, form in ipairs(secrets.redaction_forms(value)) do assert.not_matches(form, text, 1, true) end
    local again = assert(secrets.open(dir .. "/st/secrets.json", key))
    assert.same({ "DEPLOY_KEY", "NPM_TOKEN" }, again:names("acme/api"))
    assert.same({}, again:names("acme/web"))
    assert.same({ DEPLOY_KEY = value, NPM_TOKEN = value .. "-npm" }, again:values("acme/api"))
    assert.same({}, again:values("acme/web"))
    -- a sealed value moved to another name or repository does not open
    local doc = cjson.decode(text)
    doc.repositories["acme/web"] = { DEPLOY_KEY = doc.repositories["acme/api"].DEPLOY_KEY }
    doc.repositories["acme/api"].OTHER = doc.repositories["acme/api"].NPM_TOKEN
    write(dir .. "/st/secrets.json", cjson.encode(doc))
    local moved = assert(secrets.open(dir .. "/st/secrets.json", key))
    local v, err = moved:values("acme/web")
    assert.is_nil(v)
    assert.matches("does not open with this key", tostring(err), 1, true)
    assert.is_nil((moved:values("acme/api")))
    -- and another key opens nothing
    local other = assert(secrets.open(dir .. "/st/secrets.json", core.crypto.random_bytes(32)))
    assert.is_nil((other:values("acme/api")))
  end)

  it("deletes a name, and says when there was none", function()
    local store = assert(secrets.open(dir .. "/secrets.json", key))
    assert(store:set("acme/api", "DEPLOY_KEY", "value-of-the-key"))
    assert.is_true(store:delete("acme/api", "DEPLOY_KEY"))
    assert.is_false(store:delete("acme/api", "DEPLOY_KEY"))
    assert.same({}, assert(secrets.open(dir .. "/secrets.json", key)):names("acme/api"))
  end)

  it("refuses names the executor sets, bad names, bad repositories and short values", function()
    local store = assert(secrets.open(dir .. "/secrets.json", key))
    for _, name in ipairs({ "PATH", "HOME", "GH_TOKEN", "GIT_ASKPASS", "LD_PRELOAD", "BASH_ENV",
                            "SWITCHBOARD_X", "lower", "1X", "A-B", "" }) do
      local ok, err = store:set("acme/api", name, "long enough value")
      assert.is_nil(ok, name)
      assert.are.equal("secrets", err.kind)
    end
    assert.is_nil((store:set("acme", "NAME", "long enough value")))
    assert.is_nil((store:set("../x/y", "NAME", "long enough value")))
    local ok, err = store:set("acme/api", "NAME", "short")
    assert.is_nil(ok)
    assert.matches("8 to 65536 bytes", tostring(err), 1, true)
    assert.is_nil((store:set("acme/api", "NAME", "with a \0 byte")))
  end)

  it("redacts the value's base64 at every alignment within a longer encoding", function()
    for _ = 1, 50 do
      local value = core.crypto.random_bytes(8 + math.random(0, 40))
      local forms = secrets.redaction_forms(value)
      assert.are.equal(value, forms[1])
      for k = 0, 2 do
        for tail = 0, 2 do
          local around = core.crypto.random_bytes(k) .. value .. core.crypto.random_bytes(tail)
          local encoded = core.crypto.base64_encode(around)
          assert.is_truthy(encoded:find(forms[k + 2], 1, true), ("alignment %d, tail %d"):format(k, tail))
          -- the form is long enough to mean the value: at least 4/3 of it less four characters
          assert.is_true(#forms[k + 2] >= (#value * 4) // 3 - 4)
        end
      end
    end
  end)

  it("hands a repository's values to the executor and registers every form for redaction", function()
    local value = "v-" .. core.crypto.hex(core.crypto.random_bytes(10))
    local store = assert(secrets.open(dir .. "/secrets.json", key))
    assert(store:set("acme/api", "DEPLOY_KEY", value))
    local registered = {}
    local src = secrets.source{ path = dir .. "/secrets.json", redact = function(s) registered[#registered + 1] = s end }
    local snap = { execution = { secrets_key_file = dir .. "/key" } }
    assert.same({ DEPLOY_KEY = value }, src:envs("acme/api", snap))
    assert.same(secrets.redaction_forms(value), registered)
    assert.same({}, src:envs("acme/web", snap))
    local envs, err = src:envs("acme/api", { execution = { secrets_key_file = dir .. "/missing" } })
    assert.is_nil(envs)
    assert.matches("cannot read the key file", tostring(err), 1, true)
  end)
end)
