// The Worker's build stamp, set at build (wrangler.jsonc "build.command" runs this before each
// bundle), never typed into the deploy command: writes src/stamp.generated.ts with the commit
// the image context was laid out from — image/build.json, which
// `deploy/sandbox/build-image --context deploy/cloudflare/image BUILD_DIR` writes from that
// build's `switchboard version --json` — so the Worker and its image name one build.
//   node stamp.mjs                 from image/build.json (what `wrangler deploy` runs)
//   node stamp.mjs --commit SHA    a given commit (the tests: deploy/tests/cloudflare.sh)
import * as fs from "node:fs";
import * as path from "node:path";
import { fileURLToPath } from "node:url";

const here = path.dirname(fileURLToPath(import.meta.url));
const at = process.argv.indexOf("--commit");
let commit = at > 0 ? process.argv[at + 1] : undefined;
if (!commit) {
  const stampFile = path.join(here, "image", "build.json");
  try {
    commit = JSON.parse(fs.readFileSync(stampFile, "utf8")).commit;
  } catch (err) {
    console.error(`stamp.mjs: cannot read ${stampFile} (${err.message}): lay out the image context first — ` +
      "deploy/sandbox/build-image --context deploy/cloudflare/image BUILD_DIR");
    process.exit(1);
  }
}
if (typeof commit !== "string" || !/^[0-9a-zA-Z._-]+$/.test(commit)) {
  console.error(`stamp.mjs: not a build commit: ${JSON.stringify(commit)}`);
  process.exit(1);
}
fs.writeFileSync(path.join(here, "src", "stamp.generated.ts"),
  "// Written by stamp.mjs at build (wrangler.jsonc build.command); not edited, not committed.\n" +
  `export const SANDBOX_BUILD = ${JSON.stringify(commit)};\n`);
