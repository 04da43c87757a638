package server

import (
	"io"
	"net/http"
	"strings"

	"github.com/prometheus/client_golang/prometheus/promhttp"

	"github.com/condisagg/condisagg/extproc"
	"github.com/condisagg/condisagg/server/config"
	"github.com/condisagg/condisagg/server/statuspage"
)

// httpHandler serves the admin HTTP endpoints on its own mux.
// /debug/explain and the status page's data (/ui/api/) reveal cache contents and routing:
// with a token configured they require it.
func (s *service) httpHandler(admin *extproc.Admin, token string) http.Handler {
	mux := http.NewServeMux()
	mux.Handle("GET /metrics", promhttp.HandlerFor(s.reg, promhttp.HandlerOpts{Registry: s.reg}))
	mux.HandleFunc("GET /healthz", func(w http.ResponseWriter, _ *http.Request) {
		_, _ = io.WriteString(w, "ok\n")
	})
	mux.HandleFunc("GET /readyz", func(w http.ResponseWriter, _ *http.Request) {
		ready, lines := s.readiness()
		if !ready {
			w.WriteHeader(http.StatusServiceUnavailable)
			_, _ = io.WriteString(w, "not ready\n"+strings.Join(lines, "\n")+"\n")
			return
		}
		_, _ = io.WriteString(w, "ok\n"+strings.Join(lines, "\n")+"\n")
	})
	mux.Handle("POST /debug/explain", extproc.RequireToken(token, admin.ExplainHandler(func() int { return s.ext.Settings().MaxBodyBytes })))
	statuspage.Register(mux, statuspage.Sources{Router: s.router, Server: s.ext, Recent: s.recent,
		Ready:   func() bool { ready, _ := s.readiness(); return ready },
		Streams: s.reporter, Config: func() *config.Config { return s.cfg.Load() }, ConfigPath: s.flags.ConfigPath}, token)
	return mux
}
