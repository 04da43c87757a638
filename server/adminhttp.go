package server

import (
	"net/http"

	"github.com/prometheus/client_golang/prometheus/promhttp"

	"github.com/condisagg/condisagg/admin"
	"github.com/condisagg/condisagg/server/config"
	"github.com/condisagg/condisagg/server/statuspage"
)

// httpHandler serves the admin HTTP endpoints (admin.Service.HTTPMux) and the status page on
// one mux. /debug/explain and the status page's data (/ui/api/) reveal cache contents and
// routing: with a token configured they require it.
func (s *service) httpHandler(svc *admin.Service, token string) http.Handler {
	mux := svc.HTTPMux(admin.HTTPOptions{Token: token, Metrics: promhttp.HandlerFor(s.reg, promhttp.HandlerOpts{Registry: s.reg}),
		Ready: s.readiness, MaxBody: func() int { return s.ext.Settings().MaxBodyBytes }})
	statuspage.Register(mux, statuspage.Sources{Router: s.router, Server: s.ext, Recent: s.recent,
		Ready:   func() bool { ready, _ := s.readiness(); return ready },
		Streams: s.reporter, Config: func() *config.Config { return s.cfg.Load() }, ConfigPath: s.flags.ConfigPath}, token)
	return mux
}
