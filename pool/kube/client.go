package kube

import (
	"errors"
	"fmt"
	"os"
	"strings"

	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/rest"
	"k8s.io/client-go/tools/clientcmd"
)

// serviceAccountNamespace is where a pod finds its own namespace.
const serviceAccountNamespace = "/var/run/secrets/kubernetes.io/serviceaccount/namespace"

// userAgent names the router to the API server (its audit log and priority and fairness).
const userAgent = "condisagg"

// NewClient builds the API client of c and the namespace of entries that name none: the
// in-cluster configuration (the pod's service account and namespace) when c.Kubeconfig is "",
// else the kubeconfig file's current context (its namespace, else "default"). c.Namespace,
// when set, wins. It reads files only; the first request is the watcher's.
func NewClient(c Config) (kubernetes.Interface, string, error) {
	var rc *rest.Config
	ns := c.Namespace
	if c.Kubeconfig == "" {
		var err error
		if rc, err = rest.InClusterConfig(); err != nil {
			if errors.Is(err, rest.ErrNotInCluster) {
				return nil, "", fmt.Errorf("config: discovery.kubernetes.kubeconfig: \"\" uses the in-cluster configuration, "+
					"but this process is not in a pod (%v); set kubeconfig to a kubeconfig file", err)
			}
			return nil, "", fmt.Errorf("kube: in-cluster config: %w", err)
		}
		if ns == "" {
			b, err := os.ReadFile(serviceAccountNamespace)
			if err != nil {
				return nil, "", fmt.Errorf("kube: read pod namespace %s: %w (set discovery.kubernetes.namespace)", serviceAccountNamespace, err)
			}
			ns = strings.TrimSpace(string(b))
		}
	} else {
		cc := clientcmd.NewNonInteractiveDeferredLoadingClientConfig(
			&clientcmd.ClientConfigLoadingRules{ExplicitPath: c.Kubeconfig}, &clientcmd.ConfigOverrides{})
		var err error
		if rc, err = cc.ClientConfig(); err != nil {
			return nil, "", fmt.Errorf("kube: load kubeconfig %s: %w", c.Kubeconfig, err)
		}
		if ns == "" {
			if ns, _, err = cc.Namespace(); err != nil {
				return nil, "", fmt.Errorf("kube: namespace of kubeconfig %s: %w", c.Kubeconfig, err)
			}
		}
	}
	rc = rest.CopyConfig(rc)
	rc.UserAgent = userAgent
	cs, err := kubernetes.NewForConfig(rc)
	if err != nil {
		return nil, "", fmt.Errorf("kube: new client for %s: %w", rc.Host, err)
	}
	return cs, ns, nil
}
