#!/usr/bin/env bash
# Regenerates the Go code of limitd's own gRPC API from proto/limitd/v1/limitd.proto
# into proto/limitd/v1/ (limitd.pb.go, limitd_grpc.pb.go). The generated files
# are committed; run this after editing the .proto and commit both.
#
#   scripts/genproto.sh
#
# Tools, at versions that match go.mod:
#   protoc               Debian's protobuf-compiler (3.21 on bookworm; installed
#                        with apt-get when missing)
#   protoc-gen-go        google.golang.org/protobuf/cmd/protoc-gen-go, at the
#                        google.golang.org/protobuf version in go.mod (v1.36.12)
#   protoc-gen-go-grpc   google.golang.org/grpc/cmd/protoc-gen-go-grpc v1.6.2: its
#                        code needs grpc.SupportPackageIsVersion9 (grpc >= 1.64;
#                        go.mod has v1.84.0)
# Both plugins are installed with `go install` into $(go env GOPATH)/bin.
# The Envoy RLS types are not generated here: they come from
# github.com/envoyproxy/go-control-plane/envoy (envoy/service/ratelimit/v3).
set -euo pipefail
cd "$(dirname "$0")/.."

PROTOC_GEN_GO_GRPC_VERSION=v1.6.2
PROTOBUF_VERSION=$(go list -m -f '{{.Version}}' google.golang.org/protobuf)

if ! command -v protoc >/dev/null; then
	apt-get install -y protobuf-compiler >/dev/null || { apt-get update >/dev/null && apt-get install -y protobuf-compiler >/dev/null; }
fi
bin=$(go env GOPATH)/bin
go install "google.golang.org/protobuf/cmd/protoc-gen-go@${PROTOBUF_VERSION}"
go install "google.golang.org/grpc/cmd/protoc-gen-go-grpc@${PROTOC_GEN_GO_GRPC_VERSION}"

# The well-known types (google/protobuf/duration.proto) ship with protoc.
include=/usr/include
[ -f "$include/google/protobuf/duration.proto" ] || include=$(dirname "$(command -v protoc)")/../include

PATH="$bin:$PATH" protoc -I proto -I "$include" \
	--go_out=proto --go_opt=paths=source_relative \
	--go-grpc_out=proto --go-grpc_opt=paths=source_relative \
	proto/limitd/v1/limitd.proto
echo "generated: $(ls proto/limitd/v1/*.go | tr '\n' ' ')(protoc $(protoc --version | cut -d' ' -f2), protoc-gen-go ${PROTOBUF_VERSION}, protoc-gen-go-grpc ${PROTOC_GEN_GO_GRPC_VERSION})"
