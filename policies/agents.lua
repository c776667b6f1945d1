-- Agents: what each one may do and what it needs. Add one by adding an entry; no rebuild.
--   resources.repository  the agent works in a repository: it gets a workspace (the backend of
--                         policies/execution.lua) and, with token_scope, a GitHub credential.
--                         Without it the agent gets the null executor: no sandbox, no credential.
--   readonly              never writes files; gets at most the read token.
--   token_scope           "read" | "write" | nil — a scope from policies/github.lua.
--   max_run_minutes       the run's wall clock; commands are clipped to what is left of it.
--   tools                 bash, read_file, write_file, edit_file, glob, grep, list,
--                         screenshot, process_logs, process_kill, expose_port need
--                         resources.repository (the process tools are offered only where the
--                         backend has background processes: sandbox, kubernetes); todo_write
--                         (the model's plan, a checklist on the card and the run's page) needs
--                         none. docs/agent.md "Tools" lists them (`tools.help()`).
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
--   thinking              { budget_tokens = N }: extended thinking, N ≥ 1024 and < max_tokens
--                         (the card shows when the model is thinking); absent: no thinking
--   models                the models a person may pick for a thread with model:NAME (each in
--                         `models` below); absent: only the agent's own model
--   mcp_servers           MCP servers whose tools the agent is offered as mcp__SERVER__TOOL
--                         (docs/mcp.md), Claude Code's mcpServers shape:
--                           NAME = { command = { "argv", … }, env = { K = "v" } } — stdio, run
--                             inside the thread's sandbox (needs resources.repository); env is
--                             literal and visible to the agent's own commands
--                           NAME = { url = "https://…", headers = { Authorization = "Bearer ${TOKEN}" } }
--                             — streamable HTTP, called from the bot; ${NAME} is the bot's
--                             environment variable, read at each request, never logged
agents = {}

agents.coding = {
  description = "Changes code: reads, edits and runs commands in a repository, and may push.",
  resources = { repository = true },
  readonly = false,
  token_scope = "write",
  max_run_minutes = 30,
  tools = { "bash", "read_file", "write_file", "edit_file", "glob", "grep", "list", "web_fetch", "screenshot", "todo_write",
            "process_logs", "process_kill", "expose_port" },
  max_turns = 80,
  pull_requests = true,
  thinking = { budget_tokens = 6000 },
  models = { "claude-sonnet-4-5", "claude-opus-4-5", "claude-haiku-4-5" },
}

agents.review = {
  description = "Reviews a repository or pull request: reads and runs checks, never writes.",
  resources = { repository = true },
  readonly = true,
  token_scope = "read",
  max_run_minutes = 25,
  tools = { "bash", "read_file", "glob", "grep", "list", "todo_write" },
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

-- effort:low|medium|high in an ask (it sticks to the thread until changed): the extended
-- thinking budget in tokens the run gets instead of its agent's `thinking` (0: no thinking).
-- A run's max_tokens is raised above the budget when it is not (the API's rule), within the
-- model's max_output_tokens.
effort = { low = 0, medium = 6000, high = 24000 }

-- What an agent run uses when its entry does not say.
run_defaults = {
  model = "claude-sonnet-4-5",
  max_tokens = 16000,
  max_turns = 50,
  system_prompt = [[You are {agent}, an engineer working in {repository}, checked out in {workspace} (the current directory of every command).
Work with the tools ({tools}) until the task is done: look before you change, run the tests or the command that shows the result, and fix what fails.
When you are done, answer with a short summary of what you did and what you saw; say plainly what is left undone.]],
}

-- The facts a run starts with, so the agent does not spend turns finding them: gathered by
-- one command in the thread's sandbox at the run's start (within timeout_ms). What is the same
-- for every run in the workspace goes after the agent's system_prompt through `prompt` — so
-- the system prompt stays byte-identical across a thread's runs and the prompt cache holds:
-- {os} (the sandbox's), {toolchains} (the first line of each command below whose program is
-- installed and which succeeds; computed once per workspace and kept in it), {repository},
-- {default_branch}, {publishing} (`publishes` for an agent that opens pull requests, else
-- `publishes_nothing`) and {scratch}: the scratch directory the same command makes —
-- scratch_dir, inside .git/ when the run has a repository, so what the agent keeps there is
-- never committed. What belongs to this run opens its user turn through `turn`: {date} (UTC),
-- {workspace} (the workspace's path), {publish_branch} (the thread's branch the run's changes
-- are pushed to) and {git_status} (`git status --short --branch`, at most max_status_lines
-- lines). An agent's system_prompt's {workspace} is "the thread's workspace", not the path,
-- so it is the same in every thread.
environment = {
  prompt = [[## The workspace
The sandbox runs {os}; toolchains: {toolchains}.
Repository: {repository}; its default branch is {default_branch}. {publishing}
Scratch directory for notes, logs and throwaway scripts: {scratch} (never committed). Put nothing there that the change needs.
Each ask opens with this run's facts: the date, the branch and `git status` at the start.]],
  turn = [[[This run: today is {date}; the workspace is {workspace}; changes are published on branch {publish_branch}.
`git status` at the start:
{git_status}]
]],
  -- (java without -XX:-UsePerfData writes /tmp/hsperfdata_<user>, whatever TMPDIR says: on
  -- the host itself under the local backend)
  toolchains = { "python3 --version", "node --version", "go version", "rustc --version", "cargo --version",
                 "gcc --version", "make --version", "java -XX:-UsePerfData -version", "ruby --version", "git --version" },
  publishes = "When a run ends, switchboard commits your changes and publishes them on the thread's branch: do not commit, push or open a pull request yourself.",
  publishes_nothing = "This run publishes nothing: do not commit, push or open a pull request.",
  max_status_lines = 30,
  scratch_dir = "switchboard-scratch",
  timeout_ms = 30 * second,
}

-- The repository's own instructions for agents: when a run's workspace holds a repository,
-- these files (paths from its root) are read through the executor, in this order, and put at
-- the end of the system prompt. A file longer than max_file_bytes is cut there with a note;
-- once max_total_bytes are used the rest are cut (or left out) with a note. The card names
-- the files used.
-- nested_files: the same names in a subdirectory (a monorepo's package) enter the conversation
-- the first time the agent reads or changes a file under that directory, each cut at
-- max_file_bytes; the card names them.
instructions = {
  files = { "AGENTS.md", "CLAUDE.md", ".github/copilot-instructions.md" },
  nested_files = { "AGENTS.md", "CLAUDE.md" },
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
--                   {turns}, {branch}, {files} (the files this run changed, a Markdown list),
--                   {status} (draft_note for a draft, else empty); the body is Markdown. A
--                   follow-up's body is added below the description's, after a `---` line.
--   unfinished      a run that stops before the model says it is done — the turn limit, the
--                   run's time, a spend cap, a `stop` — publishes a "draft" pull request (or
--                   adds to the thread's), or "none"; a finished run's is ready for review (a
--                   draft of the thread is marked ready when a follow-up finishes)
--   draft_note      {why}: the reason the run stopped
--   publish_grace_ms  the time a run stopped by `stop` or by its clock gets to publish its draft
pull_request = {
  branch = "switchboard/{thread}-{short_id}",
  author_name = "switchboard[bot]",
  author_email = "switchboard[bot]@users.noreply.github.com",
  commit_message = "{title}\n\nAsked in {thread_link}:\n> {ask}",
  title = "{ask}",
  body = [[Asked of agent `{agent}` in {thread_link}:

> {ask}
{status}
## What the agent did

{summary}

## Files changed

{files}

---
Opened by switchboard from branch `{branch}` after {turns} model turns. A follow-up in the same thread pushes to this branch and updates this pull request.]],
  max_title_chars = 72,
  unfinished = "draft",
  draft_note = "\n**Draft:** the run stopped before the agent said it was done ({why}). Review what is here; ask again in the thread to go on.\n",
  publish_grace_ms = 2 * minute,
}

-- Review comments on the bot's pull requests (GitHub's webhooks on POST /github/webhook of the
-- bot's --listen; GITHUB_WEBHOOK_SECRET verifies them): a new comment — pull_request_review_comment,
-- pull_request_review, issue_comment on the pull request — that mentions the bot (any of
-- `mention`, case-blind) by someone whose author_association is listed starts a follow-up
-- run of `agent` in the pull request's Slack thread, with the comment, its file, line and
-- diff hunk in the ask; it pushes to the same branch and answers on the pull request with
-- `reply` ({user}, {what}: what it pushed or why nothing, {summary}: the model's answer).
review_comments = {
  agent = "coding",
  mention = { "@switchboard" },
  allow_associations = { "OWNER", "MEMBER", "COLLABORATOR" },
  reply = "@{user} {what}\n\n{summary}",
}

-- Runs started from GitHub issues (docs/github.md "Runs from issues"), on the same webhook as
-- review comments: an issue opened in one of `repositories`, assigned to the App's bot user
-- (GITHUB_BOT_LOGIN), or a comment on it that mentions "@<bot>" starts `agent` in the issue's
-- own thread, with the issue's title, body and up to max_comments comments as the ask. start_on
-- picks which of the three start one. Who may start one: allow_associations, as for review
-- comments (an assignment is the assigner's act, so it needs none). The run's card is an issue
-- comment, edited at most once per update_every_ms; its pull request says "Fixes #N".
issues = {
  agent = "coding",
  repositories = {},
  start_on = { "opened", "assigned", "mention" },
  allow_associations = { "OWNER", "MEMBER", "COLLABORATOR" },
  max_comments = 30,
  update_every_ms = 10 * second,
}

-- Reviews when a pull request opens (docs/github.md "Reviews when a pull request opens"): a
-- pull request opened (or marked ready for review: `actions`) in one of `repositories`, not a
-- draft and not the bot's own, is reviewed by `agent` in its own thread; its answer is posted as
-- a GitHub review with line comments, by the bot with a token of `post_scope` (the agent's
-- commands keep the agent's own scope). Each head is reviewed once.
pull_request_reviews = {
  agent = "review",
  repositories = {},
  actions = { "opened", "ready_for_review" },
  post_scope = "write",
}

-- Scheduled asks (docs/schedules.md): at each time `cron` matches (five fields, UTC: minute hour
-- day-of-month month day-of-week; lists, ranges, steps, names), `agent` is asked `ask` in
-- `repository` (optional: an agent without one) in a new thread of the Slack `channel`, as if
-- someone had mentioned the bot there. `name` keys the schedule's last run in the record.
-- `missed` is what a start does about times that passed while the bot was down: "skip" (none
-- runs; the next one is on time) or "run_once" (one run at once, however many were missed).
--   { name = "nightly-deps", cron = "0 3 * * mon-fri", repository = "acme/api", agent = "coding",
--     ask = "update the dependencies and run the tests", channel = "C0123456", missed = "run_once" }
schedules = {}

-- The model API (Anthropic's Messages API, streamed). ANTHROPIC_BASE_URL in switchboard's
-- environment overrides base_url; the key is ANTHROPIC_API_KEY and is never written here.
model_api = {
  base_url = "https://api.anthropic.com",
  version = "2023-06-01",               -- the anthropic-version header
  request_timeout_ms = 10 * minute,     -- one turn's request, its streamed answer included
  max_event_bytes = 8 * MiB,            -- one server-sent event; larger is an unreadable stream
  max_answer_bytes = 64 * MiB,          -- one streamed answer
  -- As Anthropic's SDKs do: 408, 409, 429, 5xx (529 included), an error event mid-stream and a
  -- stream cut mid-answer are sent again, and so is any answer whose x-should-retry header is
  -- "true" ("false" forbids it). The wait is retry-after-ms or retry-after when the API gives
  -- one between 0 and max_retry_after_ms, else first_ms doubling up to max_ms, each shortened
  -- by a random 0-jitter_percent % so that threads do not retry in lockstep; at most
  -- max_attempts sends per turn, and never a wait past the run's end.
  retry = { max_attempts = 6, first_ms = 500, max_ms = 8 * second, jitter_percent = 25,
            max_retry_after_ms = minute },
}

-- Model providers other than Anthropic's own API, each of a kind, that an agent names with
-- `provider = "NAME"` (an agent without one speaks to Anthropic: model_api above). Credentials
-- come from switchboard's environment only, by the variable names given here
-- (docs/agent.md "Model providers"). An agent's model must still have an entry in models.
--   openai: an OpenAI-compatible Chat Completions endpoint (vLLM, Ollama, OpenRouter, …):
--           base_url_env / base_url (…/v1), api_key_env (optional: a local server needs none)
--   bedrock: Claude on Amazon Bedrock (InvokeModelWithResponseStream, SigV4): region_env; the
--           credentials are AWS_ACCESS_KEY_ID, AWS_SECRET_ACCESS_KEY and AWS_SESSION_TOKEN;
--           base_url_env / base_url replace https://bedrock-runtime.{region}.amazonaws.com
--           (a VPC endpoint). The agent's model is a Bedrock model or inference profile id.
--   vertex: Claude on Google Vertex AI (streamRawPredict, OAuth2 from a service account key):
--           region_env, project_env (else the key's project_id), credentials_env (the key
--           file's path); base_url_env / base_url replace https://{region}-aiplatform.googleapis.com.
--           The agent's model is a Vertex model id (claude-sonnet-4-5@20250929).
providers = {
  vertex = { kind = "vertex", region_env = "CLOUD_ML_REGION", project_env = "ANTHROPIC_VERTEX_PROJECT_ID",
             credentials_env = "GOOGLE_APPLICATION_CREDENTIALS", base_url_env = "VERTEX_BASE_URL" },
  openai = { kind = "openai", base_url_env = "OPENAI_BASE_URL", api_key_env = "OPENAI_API_KEY" },
  bedrock = { kind = "bedrock", region_env = "AWS_REGION", base_url_env = "BEDROCK_BASE_URL" },
}

-- The models agents may use: the context window (tokens), the largest max_tokens the model
-- accepts, and the price in US dollars per million tokens — fresh input, output, cache writes
-- (5-minute cache) and cache reads (Anthropic's price list). An agent's model must be here.
models = {
  ["claude-sonnet-4-5"] = { context_tokens = 200000, max_output_tokens = 64000,
    price = { input = 3.00, output = 15.00, cache_write = 3.75, cache_read = 0.30 } },
  ["claude-opus-4-5"] = { context_tokens = 200000, max_output_tokens = 64000,
    price = { input = 5.00, output = 25.00, cache_write = 6.25, cache_read = 0.50 } },
  ["claude-haiku-4-5"] = { context_tokens = 200000, max_output_tokens = 64000,
    price = { input = 1.00, output = 5.00, cache_write = 1.25, cache_read = 0.10 } },
}

-- The conversation within the model's window. Its size is the API's own usage figures of the
-- last answer (fresh + cached input + output) plus ~1 token per 4 bytes added since. When the
-- next request would pass compact_at_percent of the model's window (or the API answers
-- "prompt is too long"), the run compacts: first the tool results older than the latest
-- keep_tool_results are elided (a line says what was elided and how to get it again); if that
-- is not enough, the model summarises the earlier turns in one extra request (at most
-- summary_max_tokens; keeping the ask, the decisions, the files touched and the plan), and
-- the conversation goes on from the ask, that summary and the latest keep_turns exchanges.
context = {
  compact_at_percent = 75,
  keep_tool_results = 4,
  keep_turns = 2,
  summary_max_tokens = 4000,
  summary_prompt = [[The conversation is about to be shortened to fit the context window. Write a summary that lets you continue the work from it alone. Do not call tools. Keep, under these headings:
The ask: what was asked, in the asker's words where it matters.
Decisions: what was decided and why.
Files touched: every file read, created or changed, and how.
Where things stand: what was done, what was seen (test results, errors), what is left.
The plan: the next steps.]],
}

-- The tools that find their way in a repository. read_file shows at most read_max_lines
-- numbered lines a call (offset and limit page through a longer file); a line longer than
-- max_line_chars is cut, in read_file and grep alike. glob (paths by pattern, newest first),
-- grep (ripgrep: matches with context lines) and list (a directory's entries with kinds and
-- sizes) run as one command each in the thread's workspace through the executor — the walls
-- and deadlines of bash — within timeout_ms (clipped to what is left of the run), and show at
-- most the bounds below. Calls of one turn that only read (read_file, glob, grep, list) run at
-- the same time; a call that changes something keeps its place in the order.
-- MCP servers' tools (docs/mcp.md): at most max_tools per server are offered; a description
-- is cut to max_description_chars; a tool whose input schema is larger than max_schema_bytes
-- is not offered (the card's note says so). An HTTP server's reply over max_reply_bytes is cut
-- off (a failed call); a stdio server's output is bounded like any command's.
mcp = {
  max_tools = 64,
  max_description_chars = 2000,
  max_schema_bytes = 16 * 1024,
  max_reply_bytes = 4 * 1024 * 1024,
}

-- web_fetch (docs/agent.md): a URL fetched inside the thread's sandbox, at most
-- max_download_bytes, each hop within timeout_ms, at most max_redirects redirects (each
-- checked again: no loopback, private or link-local destination).
-- web_search (docs/agent.md): provider "none" offers it to no agent. To offer it, name a
-- provider and list "web_search" in an agent's tools; the provider is called from the bot with
-- the key in the bot's environment variable key_env (never in the sandbox, never logged):
--   web_search = { provider = "brave", url = "https://api.search.brave.com/res/v1/web/search",
--                  key_env = "BRAVE_SEARCH_API_KEY", max_results = 8, timeout_ms = 15 * 1000 }
web_search = { provider = "none" }

web_fetch = {
  max_redirects = 5,
  max_download_bytes = 2 * 1024 * 1024,
  timeout_ms = 30 * 1000,
}

find_tools = {
  read_max_lines = 2000,
  max_line_chars = 2000,
  glob_max_paths = 200,
  grep_max_lines = 250,
  grep_max_context = 10,
  list_max_entries = 500,
  timeout_ms = minute,
}

-- A tool result longer than max_chars characters keeps head_percent of them from its start
-- and the rest from its end (errors are usually last), around a line naming what was cut;
-- the whole output is saved in the workspace under saved_dir (inside .git/ when the run has a
-- repository, so it is never committed), where read_file with offset/limit reads it.
-- read_file of an image (PNG, JPEG, GIF, WebP) up to max_image_bytes and max_image_side gives
-- the model the image; a larger one, or other binary files, a line saying what they are (and
-- how to make the image fit), never their bytes.
tool_output = {
  max_chars = 30000,
  head_percent = 40,
  saved_dir = "switchboard-outputs",
  max_image_bytes = 3750 * KiB,    -- the API takes 5 MB per image, base64 (4/3 of this) included
  max_image_side = 8000,           -- pixels; the API refuses a larger side
}

-- The screenshot tool: `command` (headless Chromium, in the sandbox image) renders a page in a
-- width×height window (the defaults; at most max_side a side, full_page makes it max_side
-- tall) within timeout_ms (clipped to what is left of the run). The PNG is bounded by
-- tool_output.max_image_bytes.
-- Background processes (bash's run_in_background, process_logs, process_kill, expose_port;
-- offered only where the executor has them: sandboxd, Kubernetes): a started command is
-- looked at once after settle_ms (its first output, whether it still runs); process_logs shows
-- the last tail_lines lines of each stream unless the model asks for another number.
processes = { settle_ms = 1000, tail_lines = 100 }

screenshot = { command = "chromium", width = 1280, height = 800, max_side = 4000, timeout_ms = minute }

-- max_tokens reached: a tool call cut short is not run; the model is told so and the turn is
-- sent again with max_tokens multiplied by grow_factor (at most the model's
-- max_output_tokens). An answer cut short is continued, at most max_continuations times.
on_max_tokens = { grow_factor = 2, max_continuations = 3 }

-- Spend caps in US dollars (the price table above); absent: no cap. per_run_usd: one run;
-- per_thread_usd: all runs of one thread; per_day_usd: all runs of one Slack workspace (the
-- console counts as one) in one UTC day. A run at a cap ends with what it has done, and the
-- card names the cap and this line. Checked before each model request: the request that
-- crosses a cap is the last one.
spend = {
  per_run_usd = 10,
  per_thread_usd = 40,
  per_day_usd = 200,
}

-- The agent of a mention that names none (`agent:NAME` always wins).
default_agent = "coding"

-- Which agent answers a free-text ask. ctx = {text = "..."}; policy = this file's settings.
-- Must return an agent name. Runs under an instruction budget; a failure falls back to the
-- shipped version of this function.
function choose_agent(ctx, policy)
  return policy.default_agent
end
