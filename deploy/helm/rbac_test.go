package helm

import (
	"slices"
	"testing"

	corev1 "k8s.io/api/core/v1"
	rbacv1 "k8s.io/api/rbac/v1"
)

// TestChartDiscoveryRBAC: with config.discovery.kubernetes the router's ServiceAccount is bound
// to a Role that may list and watch endpointslices and nothing else, in the namespace
// discovery watches, and the pod mounts the account's token; without it no Role is rendered
// and no token is mounted (pool/kube TestAPIServer runs the same Role against a real API
// server).
func TestChartDiscoveryRBAC(t *testing.T) {
	for _, v := range variants() {
		t.Run(v.name, func(t *testing.T) {
			t.Parallel()
			objs := render(t, v)
			spec, _ := routerPod(t, objs)
			discovery := v.name == "kubernetes_discovery"
			if got := spec.AutomountServiceAccountToken; got == nil || *got != discovery {
				t.Errorf("automountServiceAccountToken = %v, want %v", got, discovery)
			}
			sa := decodeAs[*corev1.ServiceAccount](t, find(t, objs, "ServiceAccount", spec.ServiceAccountName))
			if sa.AutomountServiceAccountToken == nil || *sa.AutomountServiceAccountToken {
				t.Error("the ServiceAccount must not mount its token by default (the pod decides)")
			}
			var roles []object
			for _, o := range objs {
				if o.Kind == "Role" || o.Kind == "RoleBinding" {
					roles = append(roles, o)
				}
			}
			if !discovery {
				if len(roles) > 0 {
					t.Errorf("RBAC rendered without discovery: %v", roles)
				}
				return
			}
			role := decodeAs[*rbacv1.Role](t, find(t, objs, "Role", release+"-discovery"))
			want := []rbacv1.PolicyRule{{APIGroups: []string{"discovery.k8s.io"}, Resources: []string{"endpointslices"}, Verbs: []string{"list", "watch"}}}
			if role.Namespace != namespace || !slices.EqualFunc(role.Rules, want, func(a, b rbacv1.PolicyRule) bool {
				return slices.Equal(a.APIGroups, b.APIGroups) && slices.Equal(a.Resources, b.Resources) && slices.Equal(a.Verbs, b.Verbs) &&
					len(a.ResourceNames)+len(a.NonResourceURLs) == 0
			}) {
				t.Errorf("Role %s/%s rules = %+v, want %+v", role.Namespace, role.Name, role.Rules, want)
			}
			rb := decodeAs[*rbacv1.RoleBinding](t, find(t, objs, "RoleBinding", release+"-discovery"))
			if rb.RoleRef.Kind != "Role" || rb.RoleRef.Name != role.Name || len(rb.Subjects) != 1 ||
				rb.Subjects[0].Kind != "ServiceAccount" || rb.Subjects[0].Name != spec.ServiceAccountName || rb.Subjects[0].Namespace != namespace {
				t.Errorf("RoleBinding = %+v, want the Role bound to ServiceAccount %s/%s", rb, namespace, spec.ServiceAccountName)
			}
		})
	}
}

func decodeAs[T any](t *testing.T, o object) T {
	t.Helper()
	v, err := decodeStrict(o)
	if err != nil {
		t.Fatal(err)
	}
	return v.(T)
}
