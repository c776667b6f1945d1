-- The Slack front (`switchboard slack`): who may use the bot, and how it paces itself.
-- Reloaded on SIGHUP like every policy file (`switchboard policy check` first).

-- Who may ask. workspaces: team IDs (T…); "token" is the workspace the bot token belongs to.
-- channels / users: IDs (C…/G…/D…, U…/W…); an empty list allows any. Everyone else gets
-- `refusal`, posted in their thread, and nothing runs.
allow = {
  workspaces = { "token" },
  channels = {},
  users = {},
}
refusal = "Sorry, I can't take asks from you here. Ask whoever runs this bot to add you to its allow list."

-- The emoji put on an ask when its card is posted, and the one it is replaced by when the
-- run ends: done (an agent's answer, a command's exit 0), stopped (stop, a shutdown), failed
-- (anything else: an error, a nonzero exit, a limit reached).
reaction = "eyes"
reaction_end = { done = "white_check_mark", stopped = "black_square_for_stop", failed = "x" }

card = {
  update_every_ms = 3 * second,   -- at most one chat.update per card this often (newest state wins)
  updates_per_minute = 50,        -- all cards' chat.update calls together (Slack's Tier 3: ~50/min);
                                  -- with many cards each is updated less often; the final state always lands
  max_block_chars = 2900,         -- output beyond this (in one Block Kit section) goes up as a file
  max_answer_blocks = 10,         -- an agent's answer over this many sections goes up as a file
}

api = {
  deadline_ms = 10 * second,          -- one Web API call
  max_retry_after_ms = 60 * second,   -- a 429's Retry-After is honoured up to this
  final_give_up_ms = 10 * minute,     -- a card's first post and final state are retried this long
}

socket = {
  open_deadline_ms = 10 * second,     -- apps.connections.open → WebSocket → hello
  ping_every_ms = 10 * second,        -- a ping this often; no pong for 3× this: reconnect
  reconnect_ms = { 1 * second, 2 * second, 5 * second, 10 * second, 30 * second }, -- backoff after a drop
}

events = {
  window_ms = 300 * second,           -- a signed request's timestamp may be this far from now
  dedup_ms = 60 * minute,             -- an event_id (or message, or GitHub comment) seen within this runs
                                      -- once, also across restarts (kept in the thread's record)
}

drain_ms = 30 * second                -- a TERM ends the process within this, whatever Slack does: running
flush_ms = 5 * second                 -- asks get drain_ms − flush_ms, then are killed and their cards' final
                                      -- states get what is left (what Slack has not taken by then is dropped)

-- What an agent run gets from Slack besides the ask (docs/slack.md "Context"): the first run in
-- a thread gets the thread's earlier messages (the newest max_messages, at most max_bytes, each
-- with its author's name); files attached to the ask are fetched with the bot token — images
-- (PNG, JPEG, GIF, WebP) up to max_image_bytes as images, text files cut at
-- max_text_file_bytes, anything else named on the card and skipped.
context = {
  max_messages = 30,
  max_bytes = 16 * KiB,
  max_files = 5,
  max_image_bytes = 5 * MiB,        -- the Messages API's limit for one image
  max_text_file_bytes = 64 * KiB,
  max_redirects = 2,                -- a file's redirects followed, to Slack's file hosts only
                                    -- and without the token (docs/slack.md "Context")
}
