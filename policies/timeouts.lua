-- Timeouts and limits. Operator-edited; reloaded on SIGHUP (`switchboard policy check` first).
-- Units: milliseconds (use second, minute, hour) and bytes (KiB, MiB).
-- A later line may refine an earlier one:  bash.max_ms = 30 * minute

-- The bash tool's per-call budget (timeoutMs). A finite number is truncated and clamped into
-- [floor_ms, max_ms]; absent, NaN or not a number → default_ms. Servers clamp with the same
-- numbers and never trust the client's.
bash = {
  default_ms = 5 * minute,
  max_ms = 20 * minute,
  floor_ms = 1 * second,
  kill_grace_ms = 10 * second,  -- TERM at the deadline, KILL this much later
}

-- A command's budget is capped at the run's remaining wall clock minus this reserve, so a
-- run keeps time to answer; inside the reserve a command is refused (exit 124).
run = { reserve_ms = 60 * second }

-- Every remote send waits budget + margin (headers and the streamed body) before it gives up.
call = { margin_ms = 30 * second }

-- A full sandbox fleet: re-send after these waits, then every every_ms, until the total wait
-- reaches min(the command's budget, max_wait_ms); then the command fails as capacity.
fleet_busy = {
  waits_ms = { 10 * second, 20 * second },
  every_ms = 30 * second,
  max_wait_ms = 5 * minute,
}

-- A booting container ("Container is starting"): nothing ran, so re-send once after a pause.
container_starting = { retry_after_ms = 3 * second, retries = 1 }

-- A recycle-shaped failure text only counts as a recycle this far into the attempt
-- (a typed recycle error counts at any time).
recycle = { threshold_ms = 60 * second }

sandbox = {
  heartbeat_ms = 15 * second,         -- one space on /exec while the command runs
  default_budget_ms = 280 * second,   -- the server's budget when the request names none
  sleep_after = "5m",                 -- an idle instance sleeps after this (<n>s, <n>m or <n>h)
  max_instances = 25,                 -- awake instances at once; `sandboxd --max-instances` overrides
  max_thread_key_bytes = 256,         -- the longest x-thread-key a server accepts
  max_file_bytes = 8 * MiB,           -- the largest file /read returns and /write accepts
  max_answer_bytes = 16 * MiB,        -- the largest answer body the executor reads (heartbeats included)
  -- background processes (POST /processes) and exposed ports (POST /ports), docs/sandboxd.md
  max_processes = 8,                  -- running at once per thread
  process_log_bytes = 64 * KiB,       -- the tail of each stream GET /processes/<id>/logs returns
  process_awake_ms = 30 * minute,     -- a running process keeps its instance awake this long, then ends
  max_ports = 10,                     -- exposed ports per thread
  exec_lane = true,                   -- an ordinary /exec of a settled instance served in C
                                      -- (docs/sandboxd.md "The exec lane"); false: every one in Lua
  exec_lane_report_ms = 500,          -- its answered commands reach /metrics and the idle clock in batches
                                      -- at most this late (a scrape and the idle watch see them at once)
  log_batch_ms = 10,                  -- sandboxd's info lines (one per request) are written together, each at
                                      -- most this late (one write, one wakeup of the log's reader, for
                                      -- many); a warn or error line goes at once with those held. 0: each
                                      -- at once. Lines held when sandboxd dies of a signal are lost.
  -- the lane's long answer as it comes (docs/sandboxd.md "A long answer as it comes")
  stream_at_bytes = 64 * KiB,         -- stdout past this starts the document while the command runs
  stream_step_bytes = 32 * KiB,       -- stdout encoded and written at most this much at a time
  stream_reserve_margin = 4,          -- held bytes for heartbeats past the deadline and the grace
  stream_reserve_max_bytes = 16 * KiB, -- a reserve larger than this: the answer after the end, in Lua
  -- ports_base_url = "https://preview.example.com", -- preview URLs under this instead of sandboxd's address
  -- ports_host_url = "https://{token}.preview.example.com", -- or a host per port (a wildcard name to sandboxd)
}

-- sandboxd's HTTP server. The limits are read when the server starts (a change needs a restart);
-- drain_ms and flush_ms are read when TERM arrives.
server = {
  drain_ms = 30 * second,             -- on TERM, in-flight requests get this long to finish …
  flush_ms = 2 * second,              -- … then their commands are killed and get this long to answer
  max_header_bytes = 16 * KiB,        -- request line + headers; past it: 431
  max_body_bytes = 12 * MiB,          -- a request body; past it: 413 (a /write carries base64)
  request_timeout_ms = 10 * second,   -- the time a client may take to send its whole request: 408
  idle_timeout_ms = 60 * second,      -- a keep-alive connection with no request is closed
  max_connections = 4096,             -- open connections at once (clamped to the open-files limit);
                                      -- when full, idle connections that never authenticated go first
  max_connections_per_peer = 1024,    -- open connections from one address; past it new ones get 503
  max_bodies_bytes = 64 * MiB,        -- request bodies being read, all connections together; past it: 503
}

file_op = { budget_ms = 5 * minute }  -- /read and /write (plus the call margin)

-- A cached GitHub token is reused only while it has bash.max_ms + reuse_slack_ms left, so the
-- longest command cannot outlive the token it started with.
token = { reuse_slack_ms = 5 * minute }

resident = {
  negative_cache_ms = 30 * second,    -- a failed /status probe is remembered this long
  probe_timeout_ms = 5 * second,
  -- The resident server (`switchboard resident`, docs/resident.md):
  fetch_every_ms = 5 * minute,        -- each onboarded repository is fetched on this schedule
  warm_after_start_ms = 0,            -- after a (re)start checkouts are cold until this first fetch
  clone_timeout_ms = 10 * minute,     -- one clone or fetch
  install_timeout_ms = 20 * minute,   -- the repository's install command (npm ci, pip …)
  attach_timeout_ms = 2 * minute,     -- the thread's repository (shared objects) plus its dependencies' copy
  min_free_mb = 512,                  -- less free disk under the root is "degraded (disk full)"
  -- one quick host tool of the resident's (df, git config, git rev-parse, chmod of the
  -- checkout's way): rules out a hung NFS mount or a wedged git holding the schedule forever
  tool_timeout_ms = 10 * second,
}

-- The walls (docs/isolation.md): bounds on the walls helper, so that a kernel or a helper that
-- hangs fails the one step with a reason instead of holding a thread (or the server's start)
-- forever. Generous: a busy host with hundreds of instances waking at once is slow.
walls = {
  ready_ms = 60 * second,             -- an instance's namespaces and cgroups built (the helper's "ready")
  helper_ms = 30 * second,            -- one run of the helper itself (reaping cgroups) or of chmod on the root
  probe_ms = 15 * second,             -- the start-up proof's one command inside a test instance
  stop_ms = 5 * second,               -- a stopped instance's holder gone before its cgroups are reaped
  loops_ms = 10 * second,             -- the server's stop: its instances' loop devices given back, each
                                      -- asked again while the kernel releases its mount; what is left
                                      -- is recorded, and the next start gives it back
}

-- The e2b backend (docs/e2b.md). A sandbox lives sandbox_timeout_ms after it was created or
-- last stretched (E2B's own timeout reclaims it then); a command that would outlast that first
-- stretches it to budget + call margin + this. A control-plane call waits api_timeout_ms (file
-- ops wait file_op.budget_ms + call margin). envd's own deadline (Connect-Timeout-Ms) is
-- budget + bash.kill_grace_ms + connect_grace_ms, a backstop behind our in-sandbox clamp; a
-- hard stop's group kill waits stop_timeout_ms.
e2b = {
  sandbox_timeout_ms = 15 * minute,
  api_timeout_ms = 30 * second,
  keepalive_ping_ms = 50 * second,    -- Keepalive-Ping-Interval (sent in whole seconds)
  connect_grace_ms = 5 * second,
  stop_timeout_ms = 10 * second,
  max_stream_bytes = 64 * MiB,        -- the largest process stream read (base64 output inflates)
}

-- The kubernetes backend (docs/deploy.md "Kubernetes with agent-sandbox"): one API call waits
-- api_timeout_ms; a watch asks the server to end it after watch_seconds (then it is resumed);
-- 429/503 with Retry-After are sent again max_retries times, each wait at most
-- max_retry_after_ms; after a failed operation the claim is watched gone_check_ms for a pod that
-- just died. Waiting for a ready pod is the fleet-busy wait (fleet_busy, bounded by the budget).
kubernetes = {
  api_timeout_ms = 30 * second,
  watch_seconds = 300,
  max_retries = 5,
  max_retry_after_ms = 30 * second,
  gone_check_ms = 5 * second,
}

-- Fail fast when the executor's transport failed this many times in a row.
health = { max_consecutive_infra_failures = 2 }

-- The bot's GET /readyz (docs/deploy.md "Health and readiness"): each sandboxd's /healthz is
-- probed at most every cache_ms (a probe storm is not a storm on sandboxd), each probe given
-- probe_ms before that sandboxd counts as unreachable.
readiness = { cache_ms = 2 * second, probe_ms = 3 * second }

-- Scheduled asks (docs/schedules.md): the scheduler sleeps until the next fire time, but at
-- most max_nap_ms at once, so a reload's new schedules are seen within it.
schedules = { max_nap_ms = 60 * second }

process = { max_output_bytes = 1 * MiB }  -- per stream; the rest is dropped and marked

-- The status card of an ask (console; the Slack front uses the same card): elapsed time is
-- refreshed every refresh_ms while the command runs (shown in whole seconds, so a front sees
-- at most one change a second); on TERM/INT the console stops reading and lets running asks
-- finish for drain_ms, then kills them and exits 0.
console = {
  refresh_ms = 1 * second,
  drain_ms = 30 * second,
}

-- A finished card is cut to max_chars (Slack's message limit is about 4,000 characters): the
-- head and the tail of the output stay, the middle is replaced by a line naming the file
-- under the state directory that keeps the whole output.
card = { max_chars = 4000 }
