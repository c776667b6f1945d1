// Version skew (docs/contract.md#rollout-skew): the container's /healthz build against the build this Worker
// was deployed with. A container still running the previous image during a rollout is named
// in the log; "unknown" stands for an answer that carried no build.
export interface Skew {
  container: string;
  worker: string;
}

export function containerBuild(healthz: unknown): string {
  if (typeof healthz !== "object" || healthz === null) return "unknown";
  const build = (healthz as { build?: { commit?: unknown } }).build;
  return typeof build?.commit === "string" && build.commit !== "" ? build.commit : "unknown";
}

/** The skew to log, or null when the container runs the deployed build. */
export function versionSkew(healthz: unknown, deployed: string | undefined): Skew | null {
  const container = containerBuild(healthz);
  const worker = deployed && deployed !== "" ? deployed : "unknown";
  return container === worker ? null : { container, worker };
}
