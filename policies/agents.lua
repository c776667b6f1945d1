-- Agents: what each one may do and what it needs. Add one by adding an entry; no rebuild.
--   resources.repository  the agent works in a repository: it gets a workspace (the backend of
--                         policies/execution.lua) and, with token_scope, a GitHub credential.
--                         Without it the agent gets the null executor: no sandbox, no credential.
--   readonly              never writes files; gets at most the read token.
--   token_scope           "read" | "write" | nil — a scope from policies/github.lua.
--   max_run_minutes       the run's wall clock; commands are clipped to what is left of it.
--   tools                 bash, read_file, write_file, edit_file need resources.repository.
--   network               "host" | "none": the network of the agent's sandbox instance
--                         (docs/isolation.md). Absent: policies/isolation.lua network. "none"
--                         needs walls (sandboxd, or the local executor with local_walls).
--   pull_requests         true: when a run ends with changes in its repository, switchboard
--                         commits them on the thread's branch, pushes with the agent's token
--                         and opens (or updates) a pull request (`pull_request` below).
--                         Needs the write token; a readonly agent may not have it.
-- An agent run (a free-text ask) also reads, per agent, falling back to run_defaults below:
--   model, max_tokens     the Anthropic model and its answer limit per turn
--   max_turns             model turns per run before it stops with what it has
--   system_prompt         the instructions; {agent}, {repository}, {workspace} and {tools}
--                         are filled in for each run
agents = {}

agents.coding = {
  description = "Changes code: reads, edits and runs commands in a repository, and may push.",
  resources = { repository = true },
  readonly = false,
  token_scope = "write",
  max_run_minutes = 30,
  tools = { "bash", "read_file", "write_file", "edit_file" },
  max_turns = 80,
  pull_requests = true,
}

agents.review = {
  description = "Reviews a repository or pull request: reads and runs checks, never writes.",
  resources = { repository = true },
  readonly = true,
  token_scope = "read",
  max_run_minutes = 25,
  tools = { "bash", "read_file" },
  max_turns = 60,
  system_prompt = [[You are {agent}, a code reviewer working in {repository}, checked out in {workspace}.
You may read files and run commands ({tools}) but never change anything: no edits, no commits,
no pushes, no comments. Report what you found, with file and line references, and what you ran.]],
}

agents.general = {
  description = "Answers questions without a repository: no workspace, no credential.",
  resources = {},
  readonly = true,
  token_scope = nil,
  max_run_minutes = 10,
  tools = {},
  max_turns = 1,
  system_prompt = [[You are {agent}, answering a question in a chat thread. You have no tools, no repository and no workspace: answer from what you know, briefly, and say when you are not sure.]],
}

-- What an agent run uses when its entry does not say.
run_defaults = {
  model = "claude-sonnet-4-5",
  max_tokens = 16000,
  max_turns = 50,
  system_prompt = [[You are {agent}, an engineer working in {repository}, checked out in {workspace} (the current directory of every command).
Work with the tools ({tools}) until the task is done: look before you change, run the tests or the command that shows the result, and fix what fails.
When you are done, answer with a short summary of what you did and what you saw; say plainly what is left undone.]],
}

-- The repository's own instructions for agents: when a run's workspace holds a repository,
-- these files (paths from its root) are read through the executor, in this order, and put at
-- the end of the system prompt. A file longer than max_file_bytes is cut there with a note;
-- once max_total_bytes are used the rest are cut (or left out) with a note. The card names
-- the files used.
instructions = {
  files = { "AGENTS.md", "CLAUDE.md", ".github/copilot-instructions.md" },
  max_file_bytes = 32 * KiB,
  max_total_bytes = 64 * KiB,
}

-- The pull request of an agent with pull_requests = true. When its run ends with changes
-- (files changed, or commits the agent made), the run commits what is uncommitted, pushes the
-- thread's branch and opens a pull request against the default branch, or updates the one
-- already open for that branch (a follow-up in the same thread pushes to the same branch).
--   branch          {thread} = the thread's name as a-z0-9-, {short_id} = 8 hex of the thread
--   author_name/_email  the commit's author and committer
--   title, body     {ask}, {agent}, {repository}, {thread}, {thread_link} (the Slack
--                   permalink, or "thread NAME" without one), {summary} (the model's answer),
--                   {turns}, {branch}; the body is Markdown
pull_request = {
  branch = "switchboard/{thread}-{short_id}",
  author_name = "switchboard[bot]",
  author_email = "switchboard[bot]@users.noreply.github.com",
  commit_message = "{title}\n\nAsked in {thread_link}:\n> {ask}",
  title = "{ask}",
  body = [[Asked of agent `{agent}` in {thread_link}:

> {ask}

## What the agent did

{summary}

---
Opened by switchboard from branch `{branch}` after {turns} model turns. A follow-up in the same thread pushes to this branch and updates this pull request.]],
  max_title_chars = 72,
}

-- The model API (Anthropic's Messages API, streamed). ANTHROPIC_BASE_URL in switchboard's
-- environment overrides base_url; the key is ANTHROPIC_API_KEY and is never written here.
model_api = {
  base_url = "https://api.anthropic.com",
  version = "2023-06-01",               -- the anthropic-version header
  request_timeout_ms = 10 * minute,     -- one turn's request, its streamed answer included
  max_event_bytes = 8 * MiB,            -- one server-sent event; larger is an unreadable stream
  max_answer_bytes = 64 * MiB,          -- one streamed answer
  max_tool_result_bytes = 100 * KiB,    -- a tool result longer than this keeps its head and tail
  -- 429, 529, 5xx and a stream cut mid-answer are sent again: after retry-after when the API
  -- gives one (at most max_retry_after_ms), else first_ms doubling up to max_ms; at most
  -- max_attempts sends per turn, and never past the run's end.
  retry = { max_attempts = 6, first_ms = 2 * second, max_ms = 30 * second, max_retry_after_ms = 2 * minute },
}

-- The agent of a mention that names none (`agent:NAME` always wins).
default_agent = "coding"

-- Which agent answers a free-text ask. ctx = {text = "..."}; policy = this file's settings.
-- Must return an agent name. Runs under an instruction budget; a failure falls back to the
-- shipped version of this function.
function choose_agent(ctx, policy)
  return policy.default_agent
end
