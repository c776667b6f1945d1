// The Worker as the tests run it in Cloudflare's local runtime (workerd, through miniflare):
// everything is src/worker.ts, except the platform's container runtime, which miniflare does
// not have. ctx.container — the API workerd gives a container-enabled Durable Object — is
// replaced by a small stand-in whose "container" is a real `switchboard sandboxd` the test
// started on loopback (LOCAL_SANDBOXD). Each request carries x-sandbox-instance (this
// Durable Object's id) to the test's recording proxy, which strips it before sandboxd.
import worker, { SandboxContainer as Deployed, type Env } from "../src/worker";

export { ContainerProxy } from "@cloudflare/containers";
export default worker;

interface TestEnv extends Env {
  LOCAL_SANDBOXD: string;
}

// The thread key "fleet-full" stands for a thread that arrives when max_instances are awake:
// the platform then has no instance for it (workerd's own error text).
const NO_INSTANCE = "there is no container instance that can be provided to this durable object";

function localContainer(instance: string, origin: string, started: { env?: Record<string, string> }, full: boolean) {
  let running = false;
  return {
    get running() { return running; },
    start(config?: { env?: Record<string, string> }) {
      if (full) throw new Error(NO_INSTANCE);
      running = true;
      started.env = config?.env;
    },
    monitor(): Promise<void> { return new Promise(() => {}); }, // the container never exits on its own
    async destroy() { running = false; },
    signal() {},
    getTcpPort(_port: number) {
      return {
        fetch(url: string, init?: RequestInit | Request): Promise<Response> {
          const target = new URL(url);
          const req = new Request(origin + target.pathname + target.search, init as RequestInit);
          req.headers.set("x-sandbox-instance", instance);
          if (started.env?.SANDBOX_TOKEN) req.headers.set("x-sandbox-started-with-token", "yes");
          return fetch(req);
        },
      };
    },
  };
}

export class SandboxContainer extends Deployed {
  constructor(ctx: DurableObjectState<{}>, env: TestEnv) {
    const started: { env?: Record<string, string> } = {};
    const container = localContainer(ctx.id.toString(), env.LOCAL_SANDBOXD, started, ctx.id.name === "fleet-full");
    // The platform sets ctx.container on a container-enabled class; miniflare has none.
    Object.defineProperty(ctx, "container", { value: container, configurable: true });
    super(ctx, env);
  }
}
