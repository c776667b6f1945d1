-- The thread's record (docs/record.md): one SQLite file (core.store: WAL, one writer, queries
-- in libuv's thread pool) holding, per thread, the conversation as last sent to the model,
-- the repository/branch/pull request/instance it is bound to, each run (agent, model, start,
-- end, outcome, tokens, cost, its page token) and each run's events (answers, tool calls and
-- results; commands get a row of their own: text, backend, exit, duration, output excerpt).
--
-- Every text goes through the log's scrubber before it is written (core.log_scrub): no
-- registered secret enters the file, as none enters a log line. Every call yields the task
-- until its statements committed, so what a caller was told is written survives SIGKILL.
--
--   local rec, err = record.open(path)
--   rec:threads() → {{key, repo, branch, pr_number, pr_url, instance, backend, updated_ms}, …}
--   rec:bind(key, {repo?, branch?, pr_number?, pr_url?, instance?, backend?})
--   rec:conversation(key) → messages (array, oldest first)
--   rec:save_conversation(key, messages, mark) → mark   appends what is new since mark (the
--       same message tables as last time) or rewrites the thread's conversation (compacted)
--   rec:run_start{thread, ask, agent, model, user?} → run {id, token}   token: the page's
--       secret (32 hex digits); the record keeps only its SHA-256
--   rec:event(run, record)                      a transcript line (agent/transcript.lua's shape)
--   rec:run_end(run, {outcome, turns, tokens_in, tokens_out, cost?, answer?, problem?, pr_url?})
--   rec:run_cost(run, usd)                      the run's cost so far (after each turn), so a run
--       the bot died in still counts towards the spend caps
--   rec:spend(since_wall_ms) → {threads = {{thread, cost}, …}, runs = {{thread, started_ms, cost}, …}}
--       every thread's spend, and each run's since since_wall_ms (the caps' totals after a restart)
--   rec:page(token) → run row, events, thread | nil   for the run page (thread.runs: the
--       thread's runs {id, ask, started_ms, outcome}; their tokens are not kept, so no links)
--   rec:expire(older_than_wall_ms) → threads removed (and seen keys past their expiry)
--   rec:claim(key, ttl_ms) → true (first: kept until now + ttl_ms) | false (seen, not expired)
--       | nil, err — a seen-once key (a Slack event id, a GitHub comment's signed id) shared by
--       every process that opens the file: an event replayed after a restart, or delivered to
--       the other of two overlapping processes, is claimed once
--   rec:schedule_last(name) → seconds | false (never) | nil, err   a schedule's last fire time
--   rec:schedule_claim(name, at_s) → true (this process fires at_s) | false (at_s or a later
--       time was already claimed, by this process or another) | nil, err  (dispatch/schedule.lua)
local core = require("switchboard.core")
local json = core.json
local text_cut = require("switchboard.text_cut")


local M = {}
local R = {}
R.__index = R

M.SCHEMA = {
  { [[CREATE TABLE IF NOT EXISTS threads (
        key TEXT PRIMARY KEY, repo TEXT, branch TEXT, pr_number INTEGER, pr_url TEXT,
        instance TEXT, backend TEXT, created_ms INTEGER NOT NULL, updated_ms INTEGER NOT NULL)]] },
  { [[CREATE TABLE IF NOT EXISTS messages (
        thread TEXT NOT NULL REFERENCES threads(key) ON DELETE CASCADE, seq INTEGER NOT NULL,
        role TEXT NOT NULL, body TEXT NOT NULL, PRIMARY KEY (thread, seq))]] },
  { [[CREATE TABLE IF NOT EXISTS runs (
        id INTEGER PRIMARY KEY, thread TEXT NOT NULL REFERENCES threads(key) ON DELETE CASCADE,
        token_sha256 TEXT NOT NULL UNIQUE, ask TEXT, agent TEXT, model TEXT, user TEXT,
        started_ms INTEGER NOT NULL, ended_ms INTEGER, outcome TEXT, turns INTEGER,
        tokens_in INTEGER, tokens_out INTEGER, cost REAL, answer TEXT, problem TEXT, pr_url TEXT)]] },
  { [[CREATE TABLE IF NOT EXISTS events (
        run INTEGER NOT NULL REFERENCES runs(id) ON DELETE CASCADE, seq INTEGER NOT NULL,
        type TEXT NOT NULL, at_ms INTEGER NOT NULL, body TEXT NOT NULL, PRIMARY KEY (run, seq))]] },
  { [[CREATE TABLE IF NOT EXISTS commands (
        id INTEGER PRIMARY KEY, run INTEGER NOT NULL REFERENCES runs(id) ON DELETE CASCADE,
        turn INTEGER, tool TEXT, text TEXT, backend TEXT, exit INTEGER, is_error INTEGER,
        duration_ms INTEGER, excerpt TEXT)]] },
  { "CREATE INDEX IF NOT EXISTS runs_thread ON runs(thread)" },
  { "CREATE INDEX IF NOT EXISTS threads_updated ON threads(updated_ms)" },
  { [[CREATE TABLE IF NOT EXISTS seen (key TEXT PRIMARY KEY, expires_ms INTEGER NOT NULL)]] },
  { "CREATE INDEX IF NOT EXISTS seen_expires ON seen(expires_ms)" },
  { [[CREATE TABLE IF NOT EXISTS schedules (name TEXT PRIMARY KEY, last_s INTEGER NOT NULL)]] },
}

-- opts: scrub (default core.log_scrub), wall_ms (default core.wall_ms), excerpt_bytes (the
-- output kept per command row, default 4096)
function M.open(path, opts)
  opts = opts or {}
  local db, err = core.store.open(path)
  if not db then return nil, err end
  local self = setmetatable({
    db = db, path = path, scrub = opts.scrub or core.log_scrub, wall_ms = opts.wall_ms or core.wall_ms,
    excerpt_bytes = opts.excerpt_bytes or 4096, seqs = {},
  }, R)
  local ok, serr = db:batch(M.SCHEMA)
  if not ok then
    db:close()
    return nil, serr
  end
  return self
end

function R:close() self.db:close() end

local function now(self) return math.floor(self.wall_ms()) end

local function encode(self, v)
  return self.scrub(json.encode(v))
end

local function text(self, s)
  if s == nil then return nil end
  return self.scrub(tostring(s))
end

local function touch(self, key)
  local t = now(self)
  return { "INSERT INTO threads (key, created_ms, updated_ms) VALUES (?, ?, ?) "
           .. "ON CONFLICT(key) DO UPDATE SET updated_ms = excluded.updated_ms", key, t, t, n = 4 }
end

-- The threads kept; runs a previous process left without an end (it was killed) are marked
-- interrupted first.
function R:threads()
  local ok, err = self.db:run("UPDATE runs SET outcome = 'interrupted', ended_ms = ? WHERE ended_ms IS NULL", now(self))
  if not ok then return nil, err end
  return self.db:run("SELECT key, repo, branch, pr_number, pr_url, instance, backend, updated_ms FROM threads")
end

local BIND_FIELDS = { "repo", "branch", "pr_number", "pr_url", "instance", "backend" }

function R:bind(key, fields)
  local stmts = { touch(self, key) }
  for _, f in ipairs(BIND_FIELDS) do
    if fields[f] ~= nil then
      local v = fields[f]
      if type(v) == "string" then v = text(self, v) end
      stmts[#stmts + 1] = { ("UPDATE threads SET %s = ? WHERE key = ?"):format(f), v, key, n = 3 }
    end
  end
  return self.db:batch(stmts)
end

function R:conversation(key)
  local rows, err = self.db:run("SELECT body FROM messages WHERE thread = ? ORDER BY seq", key)
  if not rows then return nil, err end
  local out = {}
  for i, r in ipairs(rows) do out[i] = json.decode(r.body) end
  return out
end

-- mark: {refs = {message tables as stored, in order}} from the last save (or nil: the thread's
-- stored conversation is unknown to the caller, so it is rewritten). A prefix that is still
-- the same tables (the loop appended) costs only the new rows; anything else (compaction
-- rewrote the start) replaces the thread's rows in the same transaction.
function R:save_conversation(key, messages, mark)
  local same = mark ~= nil and #mark.refs <= #messages
  if same then
    for i, m in ipairs(mark.refs) do
      if messages[i] ~= m then same = false break end
    end
  end
  local stmts = { touch(self, key) }
  local from = 1
  if same then
    from = #mark.refs + 1
  else
    stmts[#stmts + 1] = { "DELETE FROM messages WHERE thread = ?", key, n = 2 }
  end
  for i = from, #messages do
    local m = messages[i]
    stmts[#stmts + 1] = { "INSERT INTO messages (thread, seq, role, body) VALUES (?, ?, ?, ?)",
                          key, i, m.role, encode(self, m), n = 5 }
  end
  local ok, err = self.db:batch(stmts)
  if not ok then return nil, err end
  local refs = {}
  for i, m in ipairs(messages) do refs[i] = m end
  return { refs = refs }
end

function R:run_start(o)
  local token = core.crypto.hex(core.crypto.random_bytes(16))
  local digest = core.crypto.hex(core.crypto.sha256(token))
  local res, info = self.db:batch{
    touch(self, o.thread),
    { "INSERT INTO runs (thread, token_sha256, ask, agent, model, user, started_ms) VALUES (?, ?, ?, ?, ?, ?, ?)",
      o.thread, digest, text(self, o.ask), o.agent, o.model, o.user, now(self), n = 8 },
  }
  if not res then return nil, info end
  return { id = info.last_id, token = token, seq = 0, thread = o.thread, backend = o.backend }
end

-- The id of a run, read back once (batch results carry the last statement's rowid).
local function run_id(self, run)
  if run.id then return run.id end
  local rows = self.db:run("SELECT id FROM runs WHERE token_sha256 = ?", core.crypto.hex(core.crypto.sha256(run.token)))
  run.id = rows and rows[1] and rows[1].id
  return run.id
end

local function excerpt(self, s)
  s = tostring(s or "")
  local max = self.excerpt_bytes
  if #s <= max then return s end
  local cut = text_cut.prefix_len(s, max)
  return s:sub(1, cut) .. ("\n… [%d more bytes in the run's events]"):format(#s - cut)
end

-- A transcript line. A tool_result also gets a commands row.
function R:event(run, rec)
  local id = run_id(self, run)
  if not id then return nil end
  run.seq = run.seq + 1
  local stmts = {
    { "INSERT INTO events (run, seq, type, at_ms, body) VALUES (?, ?, ?, ?, ?)",
      id, run.seq, tostring(rec.type), now(self), encode(self, rec), n = 6 },
  }
  if rec.type == "tool_result" then
    stmts[#stmts + 1] = { "INSERT INTO commands (run, turn, tool, text, backend, exit, is_error, duration_ms, excerpt) "
      .. "VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?)", id, rec.turn, rec.name, text(self, rec.command),
      run.backend, rec.exit, rec.is_error and 1 or 0, rec.duration_ms and math.floor(rec.duration_ms),
      text(self, excerpt(self, rec.content)), n = 10 }
  end
  return self.db:batch(stmts)
end

function R:run_end(run, o)
  local id = run_id(self, run)
  if not id then return nil end
  return self.db:batch{
    touch(self, run.thread),
    { "UPDATE runs SET ended_ms = ?, outcome = ?, turns = ?, tokens_in = ?, tokens_out = ?, cost = COALESCE(?, cost), "
      .. "answer = ?, problem = ?, pr_url = ? WHERE id = ?", now(self), o.outcome, o.turns, o.tokens_in,
      o.tokens_out, o.cost, text(self, o.answer), text(self, o.problem), o.pr_url, id, n = 11 },
  }
end

function R:run_cost(run, usd)
  local id = run_id(self, run)
  if not id or type(usd) ~= "number" then return nil end
  return self.db:batch{ { "UPDATE runs SET cost = ? WHERE id = ?", usd, id, n = 3 } }
end

function R:spend(since_ms)
  local threads, err = self.db:run("SELECT thread, SUM(cost) AS cost FROM runs WHERE cost IS NOT NULL GROUP BY thread")
  if not threads then return nil, err end
  local runs, rerr = self.db:run("SELECT thread, started_ms, cost FROM runs WHERE cost IS NOT NULL AND started_ms >= ?",
    math.floor(since_ms))
  if not runs then return nil, rerr end
  return { threads = threads, runs = runs }
end

function R:page(token)
  local rows, err = self.db:run("SELECT * FROM runs WHERE token_sha256 = ?", core.crypto.hex(core.crypto.sha256(token)))
  if not rows then return nil, err end
  local run = rows[1]
  if not run then return nil end
  local ev = assert(self.db:run("SELECT type, at_ms, body FROM events WHERE run = ? ORDER BY seq", run.id))
  local events = {}
  for i, e in ipairs(ev) do
    events[i] = json.decode(e.body) or { type = e.type }
    events[i].at_ms = e.at_ms
  end
  local thread = assert(self.db:run("SELECT * FROM threads WHERE key = ?", run.thread))[1]
  if thread then
    thread.runs = assert(self.db:run("SELECT id, ask, started_ms, outcome FROM runs WHERE thread = ? ORDER BY id", run.thread))
  end
  return run, events, thread
end

function R:expire(older_than_ms)
  local res, err = self.db:batch{
    { "DELETE FROM threads WHERE updated_ms < ?", math.floor(older_than_ms), n = 2 },
    { "DELETE FROM seen WHERE expires_ms < ?", now(self), n = 2 },
  }
  if not res then return nil, err end
  return true
end

-- One statement, so two processes on the same file (a restart's overlap) cannot both win: the
-- row is inserted, or an expired one taken over; a live one is left alone (changes = 0).
function R:claim(key, ttl_ms)
  local t = now(self)
  local rows, info = self.db:run("INSERT INTO seen (key, expires_ms) VALUES (?, ?) ON CONFLICT(key) DO UPDATE "
    .. "SET expires_ms = excluded.expires_ms WHERE seen.expires_ms <= ?", tostring(key), t + math.floor(ttl_ms), t)
  if not rows then return nil, info end
  return info.changes == 1
end

function R:schedule_last(name)
  local rows, err = self.db:run("SELECT last_s FROM schedules WHERE name = ?", tostring(name))
  if not rows then return nil, err end
  return rows[1] and math.tointeger(rows[1].last_s) or false
end

-- One statement, as claim: of two processes on the same file, one fires a given time.
function R:schedule_claim(name, at_s)
  local rows, info = self.db:run("INSERT INTO schedules (name, last_s) VALUES (?, ?) ON CONFLICT(name) DO UPDATE "
    .. "SET last_s = excluded.last_s WHERE schedules.last_s < excluded.last_s", tostring(name), math.floor(at_s))
  if not rows then return nil, info end
  return info.changes == 1
end

-- Deletes threads older than the policy's retention now and every expire_every_ms, in a task
-- of its own, until stop fires. policy_fn() → the current snapshot (its `record` part).
function R:keep_expiring(policy_fn, stop)
  core.go(function()
    repeat
      local pol = policy_fn().record
      local ok, err = self:expire(self.wall_ms() - pol.retention_ms)
      if not ok then core.log("error", "record.expire_failed", { error = tostring(err) }) end
    until not core.sleep(pol.expire_every_ms, stop)
  end)
end

return M
