package main

import (
	"errors"
	"io"
	"net/http"
	"strings"

	"github.com/prometheus/client_golang/prometheus/promhttp"
	"google.golang.org/protobuf/encoding/protojson"

	"github.com/condisagg/condisagg/extproc"
	"github.com/condisagg/condisagg/route"
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
	// POST /debug/explain?path=/v1/chat/completions with the OpenAI body.
	mux.HandleFunc("POST /debug/explain", func(w http.ResponseWriter, r *http.Request) {
		if token != "" && !extproc.TokenValid(r.Header.Get("Authorization"), token) {
			w.Header().Set("WWW-Authenticate", "Bearer")
			http.Error(w, "admin: missing or wrong bearer token", http.StatusUnauthorized)
			return
		}
		path := r.URL.Query().Get("path")
		if path == "" {
			path = "/v1/chat/completions"
		}
		limit := int64(s.ext.Settings().MaxBodyBytes)
		body, err := io.ReadAll(io.LimitReader(r.Body, limit+1))
		if err != nil || int64(len(body)) > limit {
			http.Error(w, "body unreadable or over --max-body-bytes", http.StatusRequestEntityTooLarge)
			return
		}
		resp, err := admin.ExplainHTTP(r.Context(), path, body)
		if err != nil {
			code := http.StatusServiceUnavailable
			switch {
			case errors.Is(err, route.ErrInvalidBody):
				code = http.StatusBadRequest
			case errors.Is(err, route.ErrUnknownModel):
				code = http.StatusNotFound
			}
			http.Error(w, err.Error(), code)
			return
		}
		out, _ := protojson.MarshalOptions{Multiline: true, EmitUnpopulated: true}.Marshal(resp)
		w.Header().Set("content-type", "application/json")
		_, _ = w.Write(out)
	})
	s.uiRoutes(mux, token)
	return mux
}
