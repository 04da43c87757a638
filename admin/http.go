package admin

import (
	"errors"
	"io"
	"net/http"
	"strings"

	"google.golang.org/protobuf/encoding/protojson"

	"github.com/condisagg/condisagg/route"
)

// RequireToken answers 401 unless the request carries the bearer token (when one is set): the
// admin HTTP port's guard for everything that reveals cache contents or routing.
func RequireToken(token string, next http.Handler) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if token != "" && !TokenValid(r.Header.Get("Authorization"), token) {
			w.Header().Set("WWW-Authenticate", "Bearer")
			http.Error(w, "admin: missing or wrong bearer token", http.StatusUnauthorized)
			return
		}
		next.ServeHTTP(w, r)
	})
}

// ExplainHandler is POST /debug/explain?path=/v1/chat/completions[&session=ID] with the OpenAI body: the
// Admin Explain answer as JSON. Bodies over maxBody() bytes (the live max_body_bytes) get 413,
// an invalid body 400, an unknown model 404, any other routing error 503.
func (a *Service) ExplainHandler(maxBody func() int) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		path := r.URL.Query().Get("path")
		if path == "" {
			path = "/v1/chat/completions"
		}
		limit := int64(maxBody())
		body, err := io.ReadAll(io.LimitReader(r.Body, limit+1))
		if err != nil || int64(len(body)) > limit {
			http.Error(w, "body unreadable or over --max-body-bytes", http.StatusRequestEntityTooLarge)
			return
		}
		resp, err := a.explain(r.Context(), path, body, r.URL.Query().Get("session"))
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
}

// HTTPOptions are what the admin HTTP port needs besides the Service.
type HTTPOptions struct {
	Token   string                  // "": /debug/explain needs no bearer token
	Metrics http.Handler            // GET /metrics
	Ready   func() (bool, []string) // GET /readyz: whether the router is ready, and one line per detail
	MaxBody func() int              // the live max_body_bytes, /debug/explain's body limit
}

// HTTPMux returns the admin HTTP port's endpoints on a mux of their own: GET /metrics,
// GET /healthz, GET /readyz and POST /debug/explain, which reveals cache contents and routing
// and so requires the token when one is set. The caller may add more (the status page).
func (a *Service) HTTPMux(opts HTTPOptions) *http.ServeMux {
	mux := http.NewServeMux()
	mux.Handle("GET /metrics", opts.Metrics)
	mux.HandleFunc("GET /healthz", func(w http.ResponseWriter, _ *http.Request) {
		_, _ = io.WriteString(w, "ok\n")
	})
	mux.HandleFunc("GET /readyz", func(w http.ResponseWriter, _ *http.Request) {
		ready, lines := opts.Ready()
		if !ready {
			w.WriteHeader(http.StatusServiceUnavailable)
			_, _ = io.WriteString(w, "not ready\n"+strings.Join(lines, "\n")+"\n")
			return
		}
		_, _ = io.WriteString(w, "ok\n"+strings.Join(lines, "\n")+"\n")
	})
	mux.Handle("POST /debug/explain", RequireToken(opts.Token, a.ExplainHandler(opts.MaxBody)))
	return mux
}
