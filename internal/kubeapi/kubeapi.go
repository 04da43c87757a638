package kubeapi

import (
	"context"
	"crypto/rand"
	"crypto/rsa"
	"crypto/tls"
	"crypto/x509"
	"encoding/hex"
	"encoding/pem"
	"errors"
	"fmt"
	"net/http"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/condisagg/condisagg/internal/proc"
	"github.com/condisagg/condisagg/internal/repo"
	"github.com/condisagg/condisagg/internal/testport"
)

// RequireEnv, set to 1, turns a missing binary into a test failure instead of a skip.
const RequireEnv = "CONDISAGG_KUBE_E2E"

// Cluster is one running API server.
type Cluster struct {
	// Host is the API server's https URL.
	Host string
	// Admin is a kubeconfig file of a user in system:masters, namespace "default".
	Admin string
	dir   string
	users map[string]string // user name -> token
}

// ErrNoBinary means kube-apiserver or etcd is not installed.
var ErrNoBinary = errors.New("kubeapi: not installed: run scripts/install-kube-tools.sh (make kube-tools)")

// Find returns the paths of kube-apiserver and etcd: $KUBE_APISERVER_BIN and $ETCD_BIN, else
// $TOOLS_BIN/<name>, else <root>/.tools/bin/<name>.
func Find() (apiserver, etcd string, err error) {
	find := func(name, env string) (string, error) {
		p, err := repo.Tool(name, env)
		if errors.Is(err, repo.ErrNoTool) {
			return "", fmt.Errorf("%w: %w", ErrNoBinary, err)
		}
		return p, err
	}
	if apiserver, err = find("kube-apiserver", "KUBE_APISERVER_BIN"); err != nil {
		return "", "", err
	}
	etcd, err = find("etcd", "ETCD_BIN")
	return apiserver, etcd, err
}

// Start runs etcd and kube-apiserver (RBAC authorization, static bearer tokens: "admin" in
// system:masters and every name of users without groups) and waits until the API server is
// ready. Both stop when the test ends.
func Start(t testing.TB, users ...string) *Cluster {
	t.Helper()
	apiserver, etcd, err := Find()
	if err != nil {
		if os.Getenv(RequireEnv) == "1" {
			t.Fatalf("%v (%s=1 requires the real API server)", err, RequireEnv)
		}
		t.Skipf("no real Kubernetes API server: %v", err)
	}
	dir := t.TempDir()
	c := &Cluster{dir: dir, users: map[string]string{}}
	var tokens strings.Builder
	for i, u := range append([]string{"admin"}, users...) {
		c.users[u] = randomToken(t)
		group := ""
		if i == 0 {
			group = ",system:masters"
		}
		fmt.Fprintf(&tokens, "%s,%s,uid-%s%s\n", c.users[u], u, u, group)
	}
	write(t, filepath.Join(dir, "tokens.csv"), tokens.String())
	write(t, filepath.Join(dir, "sa.key"), rsaKeyPEM(t))
	base := testport.Block(t, 3) // etcd client, etcd peer, kube-apiserver
	ports := []string{strconv.Itoa(base), strconv.Itoa(base + 1), strconv.Itoa(base + 2)}
	etcdURL := "http://127.0.0.1:" + ports[0]
	startProc(t, proc.Config{Name: "etcd", Path: etcd, Args: []string{"--data-dir", filepath.Join(dir, "etcd"),
		"--listen-client-urls", etcdURL, "--advertise-client-urls", etcdURL,
		"--listen-peer-urls", "http://127.0.0.1:" + ports[1], "--initial-advertise-peer-urls", "http://127.0.0.1:" + ports[1],
		"--initial-cluster", "default=http://127.0.0.1:" + ports[1], "--log-level", "warn"}})
	c.Host = "https://127.0.0.1:" + ports[2]
	api := startProc(t, proc.Config{Name: "kube-apiserver", Path: apiserver, Args: []string{"--etcd-servers", etcdURL,
		"--bind-address", "127.0.0.1", "--secure-port", ports[2], "--cert-dir", filepath.Join(dir, "certs"),
		"--service-account-issuer", "https://kubernetes.default.svc",
		"--service-account-key-file", filepath.Join(dir, "sa.key"), "--service-account-signing-key-file", filepath.Join(dir, "sa.key"),
		"--token-auth-file", filepath.Join(dir, "tokens.csv"), "--authorization-mode", "RBAC",
		"--service-cluster-ip-range", "10.96.0.0/16", "--v", "0"}})
	c.Admin = c.Kubeconfig(t, "admin", "default")
	if err := c.waitReady(api); err != nil {
		t.Fatal(err)
	}
	return c
}

// Kubeconfig writes a kubeconfig file for user (one of Start's) with namespace ns as its
// context's namespace and returns its path.
func (c *Cluster) Kubeconfig(t testing.TB, user, ns string) string {
	t.Helper()
	tok, ok := c.users[user]
	if !ok {
		t.Fatalf("kubeapi: no user %q", user)
	}
	p := filepath.Join(c.dir, "kubeconfig-"+user+"-"+ns)
	write(t, p, fmt.Sprintf(`apiVersion: v1
kind: Config
clusters: [{name: test, cluster: {server: %q, insecure-skip-tls-verify: true}}]
users: [{name: %s, user: {token: %q}}]
contexts: [{name: test, context: {cluster: test, user: %s, namespace: %s}}]
current-context: test
`, c.Host, user, tok, user, ns))
	return p
}

// waitReady polls /readyz (an external process: no event to wait on) for up to a minute.
func (c *Cluster) waitReady(api *proc.Proc) error {
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	hc := &http.Client{Timeout: 2 * time.Second, Transport: &http.Transport{TLSClientConfig: &tls.Config{InsecureSkipVerify: true}}}
	defer hc.CloseIdleConnections()
	for {
		req, _ := http.NewRequestWithContext(ctx, http.MethodGet, c.Host+"/readyz", nil)
		req.Header.Set("Authorization", "Bearer "+c.users["admin"])
		if resp, err := hc.Do(req); err == nil {
			resp.Body.Close()
			if resp.StatusCode == http.StatusOK {
				return nil
			}
		}
		select {
		case <-api.Exited():
			return fmt.Errorf("kubeapi: kube-apiserver exited: %v\n%s", api.Err(), api.Output())
		case <-ctx.Done():
			return fmt.Errorf("kubeapi: kube-apiserver not ready after a minute:\n%s", api.Output())
		case <-time.After(200 * time.Millisecond):
		}
	}
}

func startProc(t testing.TB, cfg proc.Config) *proc.Proc {
	t.Helper()
	p, err := proc.Start(cfg)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(p.Kill) // test servers: nothing to drain
	return p
}

func randomToken(t testing.TB) string {
	b := make([]byte, 16)
	if _, err := rand.Read(b); err != nil {
		t.Fatal(err)
	}
	return hex.EncodeToString(b)
}

func rsaKeyPEM(t testing.TB) string {
	k, err := rsa.GenerateKey(rand.Reader, 2048)
	if err != nil {
		t.Fatal(err)
	}
	return string(pem.EncodeToMemory(&pem.Block{Type: "RSA PRIVATE KEY", Bytes: x509.MarshalPKCS1PrivateKey(k)}))
}

func write(t testing.TB, path, data string) {
	t.Helper()
	if err := os.WriteFile(path, []byte(data), 0o600); err != nil {
		t.Fatal(err)
	}
}
