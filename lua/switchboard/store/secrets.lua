-- Repository secrets at rest (docs/secrets.md): one JSON file under the state directory, mode
-- 0600, each value sealed with AES-256-GCM (core.crypto) under a key read from the file
-- policies/execution.lua secrets_key_file names, a fresh random 96-bit nonce per value, and
-- "OWNER/REPO\0NAME" as associated data — a sealed value copied to another repository or name
-- does not open.
--
--   local key, err = secrets.load_key(path)      -- 32 raw bytes or 64 hex digits; refused when
--                                                 -- the file is readable by group or others
--   local store, err = secrets.open(path, key)   -- the file (missing: empty)
--   store:set(repo, name, value) → true | nil, err      (written at once, atomically, 0600)
--   store:delete(repo, name) → true | false | nil, err  (false: there was none)
--   store:names(repo) → sorted list                      (names only: no key needed to list)
--   store:values(repo) → NAME → value | nil, err
--   secrets.valid_name(name), secrets.valid_repo(repo) → true | nil, why
--   secrets.redaction_forms(value) → the exact value and its base64 in the three alignments
--   secrets.source{path} → :envs(repo, snap) → NAME → value | nil, err — the
--     executor's per-command lookup: every value it hands out is registered with the log's
--     redaction first (core.log_redact), with its base64 forms, so cards, pages, the record,
--     transcripts and tool results show [redacted] in its place.
local core = require("switchboard.core")

local json = core.json

local M = {}

M.FILE = "secrets.json"
-- Values shorter than this could not be redacted (the log's redaction ignores short strings,
-- which would mask ordinary words) — refused rather than shown.
M.MIN_VALUE_BYTES = 8
M.MAX_VALUE_BYTES = 64 * 1024

-- Names the executor sets or that change how a command's shell, loader or git behave: a
-- repository secret never replaces them.
local RESERVED = {
  PATH = true, HOME = true, USER = true, LOGNAME = true, SHELL = true, PWD = true, OLDPWD = true,
  TERM = true, LANG = true, LC_ALL = true, TMPDIR = true, HOSTNAME = true, IFS = true,
  ENV = true, BASH_ENV = true, CDPATH = true, PS4 = true, SHELLOPTS = true, BASHOPTS = true,
  GH_TOKEN = true, GITHUB_TOKEN = true,
}
local RESERVED_PREFIXES = { "GIT_", "LD_", "BASH_FUNC_", "SWITCHBOARD_", "SANDBOX_" }

local function fail(message) return nil, core.error("secrets", message) end

function M.valid_name(name)
  if type(name) ~= "string" or not name:find("^[A-Z_][A-Z0-9_]*$") or #name > 128 then
    return fail(("a secret's name is an environment variable name (A-Z, 0-9 and _, not starting "
      .. "with a digit, at most 128 characters), got %q"):format(tostring(name)))
  end
  if RESERVED[name] then
    return fail(("%s is set by the executor itself and cannot be a repository secret"):format(name))
  end
  for _, prefix in ipairs(RESERVED_PREFIXES) do
    if name:sub(1, #prefix) == prefix then
      return fail(("names starting with %s are reserved for the executor and git"):format(prefix))
    end
  end
  return true
end

function M.valid_repo(repo)
  if type(repo) ~= "string" or not repo:find("^[%w._-]+/[%w._-]+$") or repo:find("%.%.") then
    return fail(("a repository is OWNER/REPO, got %q"):format(tostring(repo)))
  end
  return true
end

-- The key file: the whole file is the key (32 raw bytes, or 64 hex digits and an optional
-- newline). A key others can read is no key: refused, saying which bits to clear.
function M.load_key(path)
  if type(path) ~= "string" or path == "" then return fail("no key file is named (policies/execution.lua secrets_key_file)") end
  local dir, base = path:match("^(.*)/([^/]+)$")
  if not dir then dir, base = ".", path end
  local root, rerr = core.fs.root(dir == "" and "/" or dir)
  if not root then return fail(("cannot open the key file's directory %s: %s"):format(dir, tostring(rerr))) end
  local st, serr = root:stat(base)
  if not st then root:close(); return fail(("cannot read the key file %s: %s"):format(path, tostring(serr))) end
  if st.type ~= "file" then root:close(); return fail(("the key file %s is not a regular file"):format(path)) end
  if st.mode & 0x3f ~= 0 then
    root:close()
    return fail(("the key file %s is readable or writable by group or others (mode %o); "
      .. "chmod 600 it"):format(path, st.mode & 0xfff))
  end
  local bytes, err = root:read(base, 4096)
  root:close()
  if not bytes then return fail(("cannot read the key file %s: %s"):format(path, tostring(err))) end
  if #bytes == 32 then return bytes end
  local hex = bytes:match("^(%x+)\r?\n?$")
  if hex and #hex == 64 then
    return (hex:gsub("..", function(h) return string.char(tonumber(h, 16)) end))
  end
  return fail(("the key file %s must hold 32 raw bytes or 64 hex digits (got %d bytes); make one "
    .. "with: head -c 32 /dev/urandom > FILE && chmod 600 FILE"):format(path, #bytes))
end

local S = {}
S.__index = S

function M.open(path, key)
  local self = setmetatable({ path = path, key = key, doc = { version = 1, repositories = {} } }, S)
  if not core.fs.exists(path) then return self end
  local text, err = core.fs.read_file(path)
  if not text then return fail(("cannot read %s: %s"):format(path, tostring(err))) end
  local doc = json.decode(text)
  if type(doc) ~= "table" or type(doc.repositories) ~= "table" then
    return fail(("%s is not a secrets file this version reads"):format(path))
  end
  self.doc = doc
  return self
end

local function aad(repo, name) return repo .. "\0" .. name end

function S:set(repo, name, value)
  local ok, why = M.valid_repo(repo)
  if ok then ok, why = M.valid_name(name) end
  if not ok then return nil, why end
  if type(value) ~= "string" or #value < M.MIN_VALUE_BYTES or #value > M.MAX_VALUE_BYTES then
    return fail(("a secret's value is %d to %d bytes (shorter ones could not be redacted reliably), got %d")
      :format(M.MIN_VALUE_BYTES, M.MAX_VALUE_BYTES, type(value) == "string" and #value or 0))
  end
  if value:find("\0", 1, true) then return fail("a secret's value cannot hold a NUL byte (an environment cannot)") end
  local nonce = core.crypto.random_bytes(12)
  local sealed = assert(core.crypto.aes256gcm_seal(self.key, nonce, value, aad(repo, name)))
  local per = self.doc.repositories[repo] or {}
  per[name] = { nonce = core.crypto.base64_encode(nonce), sealed = core.crypto.base64_encode(sealed) }
  self.doc.repositories[repo] = per
  return self:save()
end

function S:delete(repo, name)
  local per = self.doc.repositories[repo]
  if not per or not per[name] then return false end
  per[name] = nil
  if next(per) == nil then self.doc.repositories[repo] = nil end
  local ok, err = self:save()
  if not ok then return nil, err end
  return true
end

function S:names(repo)
  local out = {}
  for name in pairs(self.doc.repositories[repo] or {}) do out[#out + 1] = name end
  table.sort(out)
  return out
end

function S:values(repo)
  local out = {}
  for name, entry in pairs(self.doc.repositories[repo] or {}) do
    local nonce = type(entry) == "table" and core.crypto.base64_decode(tostring(entry.nonce))
    local sealed = type(entry) == "table" and core.crypto.base64_decode(tostring(entry.sealed))
    if not nonce or #nonce ~= 12 or not sealed then return fail(("the secret %s of %s is malformed"):format(name, repo)) end
    local value = core.crypto.aes256gcm_open(self.key, nonce, sealed, aad(repo, name))
    if not value then
      return fail(("the secret %s of %s does not open with this key (another key, or the file was "
        .. "altered)"):format(name, repo))
    end
    out[name] = value
  end
  return out
end

-- Repositories are written in sorted order so the file does not churn.
function S:save()
  local dir = self.path:match("^(.*)/[^/]+$")
  if dir and dir ~= "" then
    local ok, err = core.fs.mkdir_p(dir, 448) -- 0700
    if not ok then return fail(("cannot make %s: %s"):format(dir, tostring(err))) end
  end
  local repos = {}
  for repo in pairs(self.doc.repositories) do repos[#repos + 1] = repo end
  table.sort(repos)
  local parts = {}
  for _, repo in ipairs(repos) do
    local names, per = {}, self.doc.repositories[repo]
    for name in pairs(per) do names[#names + 1] = name end
    table.sort(names)
    local entries = {}
    for _, name in ipairs(names) do
      entries[#entries + 1] = ("    %s: {\"nonce\": %s, \"sealed\": %s}"):format(
        json.encode(name), json.encode(per[name].nonce), json.encode(per[name].sealed))
    end
    parts[#parts + 1] = ("  %s: {\n%s\n  }"):format(json.encode(repo), table.concat(entries, ",\n"))
  end
  local body = ("{\"version\": 1, \"repositories\": {\n%s\n}}\n"):format(table.concat(parts, ",\n"))
  local ok, err = core.fs.write_file(self.path, body, 384) -- 0600
  if not ok then return fail(("cannot write %s: %s"):format(self.path, tostring(err))) end
  return true
end

-- The forms a value can take in text that should never show it: itself, and its base64 at each
-- of the three byte alignments it can start at within a longer encoded string (the characters
-- that depend on the neighbouring bytes are cut off each end).
function M.redaction_forms(value)
  local forms = { value }
  local skip = { [0] = 0, 2, 3 }
  for k = 0, 2 do
    local padded = string.rep("\0", k) .. value
    local encoded = core.crypto.base64_encode(padded):gsub("=+$", "")
    local whole = (#padded * 4) // 3 -- characters fixed by these bytes alone
    forms[#forms + 1] = encoded:sub(skip[k] + 1, whole)
  end
  return forms
end

function M.register(value, redact)
  redact = redact or core.log_redact
  for _, form in ipairs(M.redaction_forms(value)) do redact(form) end
end

-- The executor's lookup (exec/factory.lua opts.secrets): the store is read on every call, so a
-- secret set or deleted while a front runs applies to the next command. Without a key file in
-- policy or with an empty store a repository has no secrets; a store that cannot be read or a
-- key that does not open it fails the command (no command runs without the secrets it was
-- given).
-- opts: path (the store file), redact (default core.log_redact); snap: the ask's policies (the
-- key file is execution.secrets_key_file)
function M.source(opts)
  local src = {}
  function src.envs(_, repo, snap)
    if type(repo) ~= "string" or not core.fs.exists(opts.path) then return {} end
    local store, err = M.open(opts.path, "")
    if not store then return nil, err end
    if #store:names(repo) == 0 then return {} end
    local key
    key, err = M.load_key(snap.execution.secrets_key_file)
    if not key then return nil, err end
    store.key = key
    local values
    values, err = store:values(repo)
    if not values then return nil, err end
    for _, value in pairs(values) do M.register(value, opts.redact) end
    return values
  end
  return src
end

-- A stack's options with the source of the repository secrets stored under state_dir.
function M.with_source(stack_opts, state_dir)
  stack_opts.secrets = M.source{ path = state_dir .. "/" .. M.FILE }
  return stack_opts
end

return M
