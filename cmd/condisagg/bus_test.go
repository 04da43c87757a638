package main

import (
	"fmt"
	"io"
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/condisagg/condisagg/internal/natstest"
)

// TestServeBookingBus: with replicas.nats_url serve joins the bus (a real NATS server in this
// process, token from a file) and /readyz says so; when the bus goes, the router stays ready,
// /readyz says it books locally, and condisagg_bus_connected is 0; when it is back, 1 again.
func TestServeBookingBus(t *testing.T) {
	model := requireModel(t)
	bus, err := natstest.Start(natstest.Options{Token: "serve-bus-token-0123"})
	if err != nil {
		t.Fatal(err)
	}
	opts := bus.Options()
	tokenFile := writeFile(t, t.TempDir(), "bus-token", "serve-bus-token-0123\n")
	cfg := strings.Replace(serveYAML, "MODEL", model, 1) + fmt.Sprintf(`replicas: {nats_url: %q, token_file: %q, id: router-a, lease: 1s}
workers:
  - {name: decode-0, role: decode, endpoint: 127.0.0.1:8200, num_gpu_blocks: 100}
`, bus.URL(), tokenFile)
	a := startServe(t, cfg)
	readyz := func() (int, string) {
		resp, err := http.Get("http://" + a.http + "/readyz")
		if err != nil {
			return 0, err.Error()
		}
		defer resp.Body.Close()
		b, _ := io.ReadAll(resp.Body)
		return resp.StatusCode, string(b)
	}
	connected := func() string {
		resp, err := http.Get("http://" + a.http + "/metrics")
		if err != nil {
			return err.Error()
		}
		defer resp.Body.Close()
		b, _ := io.ReadAll(resp.Body)
		for _, line := range strings.Split(string(b), "\n") {
			if strings.HasPrefix(line, "condisagg_bus_connected ") {
				return strings.TrimPrefix(line, "condisagg_bus_connected ")
			}
		}
		return "absent"
	}
	// The bus is a socket of its own: its state is awaited with a deadline.
	wait := func(what, text, metric string) {
		t.Helper()
		var code int
		var body string
		for deadline := time.Now().Add(15 * time.Second); time.Now().Before(deadline); time.Sleep(20 * time.Millisecond) {
			if code, body = readyz(); code == http.StatusOK && strings.Contains(body, text) && connected() == metric {
				return
			}
		}
		t.Fatalf("%s: /readyz %d %q, condisagg_bus_connected %s; want 200 with %q and %s", what, code, body, connected(), text, metric)
	}
	wait("joined", "replicas bus: connected as router-a (0 peer bookings)", "1")
	bus.Stop()
	wait("bus lost", "replicas bus: down, booking locally as router-a", "0")
	back, err := natstest.Start(opts)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(back.Stop)
	wait("bus back", "replicas bus: connected as router-a", "1")
	if _, body := readyz(); strings.Contains(body, "serve-bus-token") {
		t.Fatalf("/readyz shows the token: %s", body)
	}
}
