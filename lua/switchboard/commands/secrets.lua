-- `switchboard secrets set|list|delete OWNER/REPO [NAME]`: a repository's secrets, sealed at rest
-- under the state directory (store/secrets.lua, docs/secrets.md). A value comes from standard
-- input only, never from the command line (argv is visible to every user of the host).
local core = require("switchboard.core")
local prologue = require("switchboard.launch.prologue")
local secrets = require("switchboard.store.secrets")
local state = require("switchboard.state")

local M = {
  name = "secrets",
  summary = "set, list or delete a repository's secrets (given to its commands' environment)",
  quiet_logs = true,
  help = [[
Usage: switchboard secrets set OWNER/REPO NAME      (the value from standard input)
       switchboard secrets list OWNER/REPO           (names only)
       switchboard secrets delete OWNER/REPO NAME

A repository's secrets are in the environment of the commands an agent runs for a thread on
that repository, and nowhere else: never in the model's request (a command's output that holds
one reaches the model as [redacted]), never on a card, a run page, the record or a log line
(the exact value and its base64 are written [redacted]).

They are sealed with AES-256-GCM in $SWITCHBOARD_STATE_DIR/secrets.json (mode 0600) under the
key in the file policies/execution.lua secrets_key_file names: 32 raw bytes or 64 hex digits,
readable by its owner only. Make one with

  head -c 32 /dev/urandom > /etc/switchboard/secrets.key && chmod 600 /etc/switchboard/secrets.key

Examples:
  printf %s "$NPM_TOKEN" | switchboard secrets set acme/api NPM_TOKEN
  switchboard secrets set acme/api DATABASE_URL < database-url.txt
  switchboard secrets list acme/api
  switchboard secrets delete acme/api NPM_TOKEN

A value is 8 bytes to 64 KiB; one trailing newline (as `echo` adds) is dropped. A name follows
the environment's rules (A-Z, 0-9, _); the executor's own (PATH, HOME, GH_TOKEN, GIT_*, LD_*, …)
are refused.

Exit status: 0 done; 1 the store or the key refused (said why; delete: no such secret);
2 usage; 78 the policies do not load.
]],
}

local ARITY = { set = 3, list = 2, delete = 3 }

local function usage(p)
  local verb = p.words[1]
  if not ARITY[verb] then
    return ("the first word is set, list or delete, got %q (see --help)"):format(tostring(verb))
  end
  if #p.words ~= ARITY[verb] then
    return ("secrets %s takes %s"):format(verb, verb == "list" and "OWNER/REPO" or "OWNER/REPO NAME")
  end
  local ok, why = secrets.valid_repo(p.words[2])
  if ok and verb ~= "list" then ok, why = secrets.valid_name(p.words[3]) end
  if not ok then return tostring(why) end
end

local function read_all()
  local chunks = {}
  while true do
    local chunk = core.read_stdin()
    if chunk == nil then break end
    if core.is_error(chunk) then return nil, chunk end
    chunks[#chunks + 1] = chunk
  end
  return (table.concat(chunks):gsub("\r?\n$", ""))
end

function M.run(argv, ctx)
  local p, status = prologue.start(M, argv, ctx, { spec = {}, usage = usage, policies = true })
  if not p then return status end
  local verb, repo, name = p.words[1], p.words[2], p.words[3]
  local path = state.dir(ctx.getenv) .. "/" .. secrets.FILE
  local key = ""
  if verb == "set" then
    local why
    key, why = secrets.load_key(p.snap.execution.secrets_key_file)
    if not key then return p:fail(1, tostring(why)) end
  end
  local store, err = secrets.open(path, key)
  if not store then return p:fail(1, tostring(err)) end
  if verb == "list" then
    for _, n in ipairs(store:names(repo)) do p:say(n) end
    return 0
  end
  if verb == "delete" then
    local gone, derr = store:delete(repo, name)
    if gone == nil then return p:fail(1, tostring(derr)) end
    if not gone then return p:fail(1, ("%s has no secret %s"):format(repo, name)) end
    p:say(("deleted %s of %s"):format(name, repo))
    return 0
  end
  local value, rerr = read_all()
  if not value then return p:fail(1, "cannot read the value from standard input: " .. tostring(rerr)) end
  local ok, serr = store:set(repo, name, value)
  if not ok then return p:fail(1, tostring(serr)) end
  p:say(("set %s of %s (%d bytes)"):format(name, repo, #value))
  return 0
end

return M
