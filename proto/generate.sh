#!/usr/bin/env bash
# Regenerates proto/condisagg/v1/*.pb.go from admin.proto. Needs protoc (Debian
# protobuf-compiler, libprotoc 3.21.12) and the Go plugins:
#   go install google.golang.org/protobuf/cmd/protoc-gen-go@v1.36.12
#   go install google.golang.org/grpc/cmd/protoc-gen-go-grpc@v1.5.1
set -euo pipefail
cd "$(dirname "$0")"
PATH="$(go env GOPATH)/bin:$PATH"
protoc --proto_path=. \
  --go_out=. --go_opt=paths=source_relative \
  --go-grpc_out=. --go-grpc_opt=paths=source_relative \
  condisagg/v1/admin.proto
