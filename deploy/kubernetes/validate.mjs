// Validates Kubernetes manifests against the API's OpenAPI schemas, as
// bundled by the npm package kubernetes-models (JSON schemas checked with
// ajv). Usage, with the packages installed by deploy/kubernetes/validate.sh:
//   NODE_PATH=DIR/node_modules node deploy/kubernetes/validate.mjs FILE...
// Exits 1 naming each invalid document and field.
import { createRequire } from "node:module";
import { readFileSync } from "node:fs";
import path from "node:path";

const require = createRequire(path.join(process.env.NODE_PATH || ".", "x.js"));
const yaml = require("js-yaml");
const kinds = {
  "v1/Service": () => require("kubernetes-models/v1/Service").Service,
  "v1/ConfigMap": () => require("kubernetes-models/v1/ConfigMap").ConfigMap,
  "v1/Secret": () => require("kubernetes-models/v1/Secret").Secret,
  "apps/v1/StatefulSet": () => require("kubernetes-models/apps/v1/StatefulSet").StatefulSet,
  "policy/v1/PodDisruptionBudget": () => require("kubernetes-models/policy/v1/PodDisruptionBudget").PodDisruptionBudget,
};

let failed = 0, checked = 0;
for (const file of process.argv.slice(2)) {
  const docs = yaml.loadAll(readFileSync(file, "utf8")).filter((d) => d != null);
  for (const doc of docs) {
    const what = `${file}: ${doc.kind} ${doc.metadata?.name}`;
    const model = kinds[`${doc.apiVersion}/${doc.kind}`];
    if (!model) {
      console.error(`${what}: no schema for apiVersion ${doc.apiVersion} kind ${doc.kind}`);
      failed++;
      continue;
    }
    try {
      const Model = model();
      new Model(doc).validate();
      checked++;
    } catch (e) {
      console.error(`${what}: ${e.message}`);
      failed++;
    }
  }
}
console.log(`${checked} documents valid, ${failed} invalid`);
process.exit(failed > 0 || checked === 0 ? 1 : 0);
