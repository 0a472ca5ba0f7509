// `npm run gen`: the clients, generated, never hand-written. The gRPC-web client from
// ../proto (buf with protoc-gen-es) and the REST types from the OpenAPI document the server
// serves (`onsale openapi`, written to src/gen/openapi.json by scripts/web.sh, or given
// here as ONSALE_OPENAPI). Both land in src/gen/, which git ignores.
import { execFileSync } from "node:child_process";
import { existsSync, mkdirSync } from "node:fs";
import { dirname, join } from "node:path";
import { fileURLToPath } from "node:url";

const web = join(dirname(fileURLToPath(import.meta.url)), "..");
const gen = join(web, "src", "gen");
mkdirSync(gen, { recursive: true });
const bin = (name) => join(web, "node_modules", ".bin", name);
const run = (cmd, args) => execFileSync(cmd, args, { cwd: web, stdio: "inherit" });

run(bin("buf"), ["generate", join(web, "..", "proto"), "--template", join(web, "buf.gen.yaml")]);

const openapi = process.env.ONSALE_OPENAPI ?? join(gen, "openapi.json");
if (!existsSync(openapi)) {
  console.error(`${openapi} is missing: run scripts/web.sh (it writes it with \`onsale openapi\`)`);
  process.exit(1);
}
run(bin("openapi-typescript"), [openapi, "--output", join(gen, "api.d.ts")]);
