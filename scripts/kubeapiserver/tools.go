//go:build tools

// Package tools pins k8s.io/kubernetes (cmd/kube-apiserver, cmd/kubectl) in this module; the etcd
// server at the version kube-apiserver is built against is ./etcd. scripts/install-kube-tools.sh
// builds all three. Kubernetes' own go.mod replaces its k8s.io/* staging modules by directories
// of its repository; this module's replace directives name the published versions instead.
package tools

import (
	_ "k8s.io/kubernetes/cmd/kube-apiserver"
	_ "k8s.io/kubernetes/cmd/kubectl"
)
