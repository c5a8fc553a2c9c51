#!/usr/bin/env bash
# Validates deploy/kubernetes/*.yaml against Kubernetes' API schemas with the
# npm package kubernetes-models (its bundled OpenAPI JSON schemas, checked by
# ajv) and js-yaml, installed once into DIR (default
# ~/.cache/limitd/k8s-validate). Needs node and npm.
#
#   deploy/kubernetes/validate.sh            # install if needed, then validate
#   deploy/kubernetes/validate.sh --install  # install only (CI set-up)
#
# The Go test TestKubernetesSchemas (e2e) runs the same validator when
# DIR has the packages. Types, enums and required fields are checked; the
# schemas allow unknown fields, which the Go test's structural checks cover
# only for the fields it reads.
set -euo pipefail
here=$(cd "$(dirname "$0")" && pwd)
dir=${LIMITD_K8S_VALIDATE_DIR:-$HOME/.cache/limitd/k8s-validate}
if [[ ! -d $dir/node_modules/kubernetes-models || ! -d $dir/node_modules/js-yaml ]]; then
	mkdir -p "$dir"
	npm install --prefix "$dir" --no-audit --no-fund --no-save kubernetes-models@4.5.1 js-yaml@5.5.0 >&2
fi
[[ ${1:-} == --install ]] && exit 0
NODE_PATH=$dir/node_modules exec node "$here/validate.mjs" "$here"/*.yaml
