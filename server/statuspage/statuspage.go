package statuspage

import (
	"embed"
	"encoding/json"
	"io/fs"
	"net/http"
	"strconv"
	"time"

	"github.com/condisagg/condisagg/admin"
	"github.com/condisagg/condisagg/decisionlog"
	"github.com/condisagg/condisagg/extproc"
	"github.com/condisagg/condisagg/route"
	"github.com/condisagg/condisagg/server/config"
)

// Sources are what the page reads, each at request time. The router, the ext_proc server and
// the ring are built once per process; readiness, streams and the configuration are read
// through functions because they change while serving.
type Sources struct {
	Router *route.Router
	Server *extproc.Server     // its ring of classified remote-prefill transfers
	Recent *decisionlog.Recent // the last decisions and the placement mix
	// Ready reports whether the router can route (a healthy decode worker exists).
	Ready func() bool
	// Streams reports the KV event streams; it may return nil (no event streams).
	Streams func() admin.StreamReporter
	// Config is the configuration in force (the last accepted reload).
	Config func() *config.Config
	// ConfigPath is the configuration file ("" : flags only).
	ConfigPath string
}

// uiFiles is the status page: static HTML, JS and CSS, no build step. The shell holds no data;
// the script fetches everything from /ui/api/*, which the admin token protects.
//
//go:embed ui
var uiFiles embed.FS

// page serves the status page from its sources.
type page struct{ Sources }

// uiDecisionsDefault is how many decisions /ui/api/state returns without ?decisions=.
const uiDecisionsDefault = 50

// Register adds the read-only status page to mux: the static shell under /ui/ and its JSON
// under /ui/api/ (with a token configured, every API call needs it as a bearer header, like
// /debug/explain).
func Register(mux *http.ServeMux, src Sources, token string) {
	s := &page{src}
	static, err := fs.Sub(uiFiles, "ui")
	if err != nil {
		panic(err) // the embedded directory is part of the binary
	}
	files := http.StripPrefix("/ui/", http.FileServerFS(static))
	mux.HandleFunc("GET /ui", func(w http.ResponseWriter, r *http.Request) {
		http.Redirect(w, r, "/ui/", http.StatusMovedPermanently)
	})
	mux.Handle("GET /ui/", uiHeaders(files))
	mux.Handle("GET /ui/api/state", uiHeaders(admin.RequireToken(token, http.HandlerFunc(s.uiState))))
	mux.Handle("GET /ui/api/config", uiHeaders(admin.RequireToken(token, http.HandlerFunc(s.uiConfig))))
	mux.Handle("GET /ui/api/", uiHeaders(admin.RequireToken(token, http.NotFoundHandler())))
}

// uiHeaders sets what every status page answer carries: no caching, no framing, no sniffing,
// and a policy that lets the page load only its own files and talk only to its own origin.
func uiHeaders(next http.Handler) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		h := w.Header()
		h.Set("Cache-Control", "no-store")
		h.Set("X-Content-Type-Options", "nosniff")
		h.Set("Referrer-Policy", "no-referrer")
		h.Set("X-Frame-Options", "DENY")
		h.Set("Content-Security-Policy", "default-src 'none'; script-src 'self'; style-src 'self'; "+
			"connect-src 'self'; img-src 'self'; base-uri 'none'; form-action 'none'; frame-ancestors 'none'")
		next.ServeHTTP(w, r)
	})
}

// uiState is GET /ui/api/state[?decisions=N]: the fleet, the latest decisions and the mix.
func (s *page) uiState(w http.ResponseWriter, r *http.Request) {
	limit := uiDecisionsDefault
	if q := r.URL.Query().Get("decisions"); q != "" {
		n, err := strconv.Atoi(q)
		if err != nil || n < 0 || n > decisionlog.MaxRecentDecisions {
			http.Error(w, "decisions: "+strconv.Quote(q)+" must be an integer in [0, "+strconv.Itoa(decisionlog.MaxRecentDecisions)+"]", http.StatusBadRequest)
			return
		}
		limit = n
	}
	writeJSON(w, s.stateView(time.Now(), limit))
}

// uiConfig is GET /ui/api/config: the configuration in force, secrets redacted.
func (s *page) uiConfig(w http.ResponseWriter, _ *http.Request) {
	v, err := s.configView()
	if err != nil {
		http.Error(w, err.Error(), http.StatusInternalServerError)
		return
	}
	writeJSON(w, v)
}

func writeJSON(w http.ResponseWriter, v any) {
	b, err := json.Marshal(v)
	if err != nil {
		http.Error(w, "encode: "+err.Error(), http.StatusInternalServerError)
		return
	}
	w.Header().Set("Content-Type", "application/json")
	_, _ = w.Write(b)
}
