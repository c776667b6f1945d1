-- Agents: what each one may do and what it needs. Add one by adding an entry; no rebuild.
--   resources.repository  the agent works in a repository: it gets a workspace (the backend of
--                         policies/execution.lua) and, with token_scope, a GitHub credential.
--                         Without it the agent gets the null executor: no sandbox, no credential.
--   readonly              never writes files; gets at most the read token.
--   token_scope           "read" | "write" | nil — a scope from policies/github.lua.
--   max_run_minutes       the run's wall clock; commands are clipped to what is left of it.
--   tools                 bash, read_file, write_file need resources.repository.
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
  tools = { "bash", "read_file", "write_file" },
  max_turns = 80,
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
