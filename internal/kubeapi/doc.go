// Package kubeapi runs a real Kubernetes API server for tests: etcd and kube-apiserver,
// built from Go modules by scripts/install-kube-tools.sh, on 127.0.0.1 with ephemeral ports,
// stopped when the test ends. Start skips the test when the binaries are absent, unless
// CONDISAGG_KUBE_E2E=1 (make test-kube) makes that a failure.
//
// It starts child processes through internal/proc and reads files; test binaries only.
package kubeapi
