-- Agents: what each one may do and what it needs. Add one by adding an entry; no rebuild.
--   resources.repository  the agent works in a repository: it gets a workspace (the backend of
--                         policies/execution.lua) and, with token_scope, a GitHub credential.
--                         Without it the agent gets the null executor: no sandbox, no credential.
--   readonly              never writes files; gets at most the read token.
--   token_scope           "read" | "write" | nil — a scope from policies/github.lua.
--   max_run_minutes       the run's wall clock; commands are clipped to what is left of it.
--   tools                 bash, read_file, write_file need resources.repository.
agents = {}

agents.coding = {
  description = "Changes code: reads, edits and runs commands in a repository, and may push.",
  resources = { repository = true },
  readonly = false,
  token_scope = "write",
  max_run_minutes = 30,
  tools = { "bash", "read_file", "write_file" },
}

agents.review = {
  description = "Reviews a repository or pull request: reads and runs checks, never writes.",
  resources = { repository = true },
  readonly = true,
  token_scope = "read",
  max_run_minutes = 25,
  tools = { "bash", "read_file" },
}

agents.general = {
  description = "Answers questions without a repository: no workspace, no credential.",
  resources = {},
  readonly = true,
  token_scope = nil,
  max_run_minutes = 10,
  tools = {},
}

-- The agent of a mention that names none (`agent:NAME` always wins).
default_agent = "coding"

-- Which agent answers a free-text ask. ctx = {text = "..."}; policy = this file's settings.
-- Must return an agent name. Runs under an instruction budget; a failure falls back to the
-- shipped version of this function.
function choose_agent(ctx, policy)
  return policy.default_agent
end
