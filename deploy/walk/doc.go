// Package walk runs docs/deploy.md from an empty namespace against a real kube-apiserver and
// etcd (internal/kubeapi): every helm install and kubectl command of the walk-through, as
// written, in the order of the document, with the real helm and kubectl. No kubelet, scheduler or
// controller manager runs, so the test stands in for the three controllers whose output the
// walk-through relies on (the ReplicaSet controller and scheduler creating and binding each
// Deployment's pods, a kubelet reporting them ready, and the EndpointSlice controller, whose
// reconciler from k8s.io/endpointslice writes the slices), and checks that the router's
// Kubernetes discovery (pool/kube), authenticated as the chart's ServiceAccount, finds one worker
// per fleet pod. Commands that need a running pod or a component that is not here carry
// "not run here: <reason>" in the document and are skipped, each one logged.
//
// The package holds tests only; TestDeployWalk skips without the API server binaries
// (scripts/install-kube-tools.sh) and fails without them when CONDISAGG_KUBE_E2E=1
// (make test-kube).
package walk
