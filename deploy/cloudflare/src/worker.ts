// The sandbox Worker (docs/deploy.md "Cloudflare"): a thin front for the sandbox image on
// Cloudflare Containers. It checks the bearer, sends each x-thread-key to a container
// instance of its own (one Durable Object per thread key), and passes /exec, /read, /write
// and /healthz through unchanged — sandboxd inside the container speaks the wire protocol
// (docs/contract.md#wire-protocol) and checks the same bearer again. The one rewrite is the
// platform's fleet-full 503 (fleetBusy below); nothing else lives here.
import { Container, getContainer } from "@cloudflare/containers";
import { bearerMatches } from "./auth";
import { versionSkew } from "./skew";
// The commit this Worker and its image were built from, set at build by stamp.mjs.
import { SANDBOX_BUILD } from "./stamp.generated";

export { ContainerProxy } from "@cloudflare/containers";

export interface Env {
  SANDBOX: DurableObjectNamespace<SandboxContainer>;
  /** The bearer every route needs (`wrangler secret put SANDBOX_TOKEN`); the container gets it too. */
  SANDBOX_TOKEN: string;
  /** How long an idle thread's container stays warm (wrangler.jsonc vars: "5m"). */
  SANDBOX_SLEEP_AFTER: string;
}

const ROUTES = new Set(["/exec", "/read", "/write", "/healthz"]);
const THREAD_HEADER = "x-thread-key";
const SANDBOXD_PORT = 8080;

function answer(status: number, error: string): Response {
  return Response.json({ error }, { status });
}

// The one answer the Worker rewrites: with max_instances containers awake, the platform has
// no instance for a new thread and the containers library answers a plain-text 503. The
// executor waits and re-sends only on the protocol's machine-readable form (docs/contract.md#capacity), so
// that 503 becomes {error, reason: "fleet-busy"}, keeping the platform's words as the cause.
// Every other answer — sandboxd's own JSON included — passes through untouched.
async function fleetBusy(res: Response): Promise<Response> {
  if (res.status !== 503 || (res.headers.get("content-type") ?? "").includes("json")) return res;
  const cause = (await res.text()).split("\n")[0] || "no container instance is available";
  return Response.json(
    { error: `the sandbox fleet is full (max_instances containers awake): ${cause}`, reason: "fleet-busy" },
    { status: 503 },
  );
}

export class SandboxContainer extends Container<Env> {
  defaultPort = SANDBOXD_PORT;

  constructor(ctx: DurableObjectState<{}>, env: Env) {
    super(ctx, env);
    // A thread's container stays warm for SANDBOX_SLEEP_AFTER of idle (5m; docs/contract.md#workspaces); a
    // request in flight is never idle time (the base class counts in-flight requests).
    this.sleepAfter = env.SANDBOX_SLEEP_AFTER || "5m";
    this.envVars = { SANDBOX_TOKEN: env.SANDBOX_TOKEN };
  }

  // Log only (docs/contract.md#rollout-skew): onStart runs inside blockConcurrencyWhile, so the check runs
  // beside it and never destroys or retries anything — a skewed instance is named in the log
  // and serves as it is; the rollout's one wave replaces it.
  override onStart(): void {
    this.ctx.waitUntil(this.reportVersionSkew());
  }

  async reportVersionSkew(): Promise<void> {
    let body: unknown = null;
    try {
      const res = await this.containerFetch(new Request("http://sandbox/healthz", {
        headers: { authorization: `Bearer ${this.env.SANDBOX_TOKEN}` },
      }), SANDBOXD_PORT);
      body = res.ok ? await res.json() : null;
    } catch {
      body = null;
    }
    const skew = versionSkew(body, SANDBOX_BUILD);
    if (skew) console.warn(JSON.stringify({ level: "warn", event: "sandbox.version-skew", ...skew }));
  }
}

export default {
  async fetch(request: Request, env: Env): Promise<Response> {
    const url = new URL(request.url);
    if (!ROUTES.has(url.pathname)) return answer(404, `no route ${url.pathname}: use /exec, /read, /write or /healthz`);
    if (!(await bearerMatches(request.headers.get("authorization"), env.SANDBOX_TOKEN))) {
      return answer(401, "authorization: Bearer <SANDBOX_TOKEN> is required");
    }
    const thread = request.headers.get(THREAD_HEADER);
    if (!thread) return answer(400, `${THREAD_HEADER} is required: each thread has a sandbox of its own`);
    return fleetBusy(await getContainer(env.SANDBOX, thread).fetch(request));
  },
} satisfies ExportedHandler<Env>;
