-- The thread's record (docs/record.md): what the bot keeps of each thread — the conversation
-- as sent to the model, its runs and commands, its repository, branch and pull request — in
-- <state dir>/record.db, so that a follow-up continues the thread, also after a restart.
-- Secrets never enter it (the log's redaction is applied to everything written).

-- A thread nobody wrote in for this long is deleted with its conversation, runs and pages.
retention_ms = 30 * 24 * hour
-- How often the expiry runs (and once at start).
expire_every_ms = 1 * hour
-- The output kept in each command's row (the run page shows the whole tool result).
excerpt_bytes = 4 * KiB

-- The run pages: a read-only page per run at base_url .. "/runs/<token>", served on the Slack
-- bot's --pages-listen address (or its --listen one). enabled = false serves none: every page
-- answers 404 and cards carry no link. base_url is the address people open (behind your
-- proxy, e.g. base_url = "https://switchboard.example.com"); unset: the listener's own
-- http://HOST:PORT.
pages = {
  enabled = true,
  tool_open_bytes = 2 * KiB,   -- a tool call's output longer than this starts collapsed,
  tool_open_lines = 40,        -- or with more lines than this
  diff_open_lines = 300,       -- a file's diff longer than this starts collapsed
  diff_max_bytes = 1 * MiB,    -- the run's diff kept for its page (the rest is cut, and says so)
  image_max_bytes = 2 * MiB,   -- a screenshot larger than this is named on the page, not kept
}
