// Package natstest runs a real NATS server inside a test process, on 127.0.0.1, for the tests
// of the shared-booking bus (bookbus) and the e2e suite. It is a test helper: only _test files
// and e2e import it.
package natstest

import (
	"crypto/tls"
	"fmt"
	"net"
	"strconv"
	"time"

	"github.com/nats-io/nats-server/v2/server"
)

// Options of one embedded server. Port 0 takes a free port.
type Options struct {
	Port     int
	Token    string // clients must present it (exclusive with User)
	User     string // clients must log in as User with Password
	Password string
	// TLS, when set, makes the server speak TLS only (clients dial tls://).
	TLS *tls.Config
}

// Server is one running embedded NATS server.
type Server struct {
	s    *server.Server
	opts Options
}

// Start runs a server on 127.0.0.1 and waits until it accepts clients.
func Start(o Options) (*Server, error) {
	so := &server.Options{Host: "127.0.0.1", Port: o.Port, NoLog: true, NoSigs: true,
		Authorization: o.Token, Username: o.User, Password: o.Password, TLS: o.TLS != nil, TLSConfig: o.TLS, TLSTimeout: 2}
	if so.Port == 0 {
		so.Port = server.RANDOM_PORT
	}
	s, err := server.NewServer(so)
	if err != nil {
		return nil, fmt.Errorf("natstest: new server: %w", err)
	}
	s.Start() // the server runs its accept loop on its own goroutines
	if !s.ReadyForConnections(10 * time.Second) {
		s.Shutdown()
		s.WaitForShutdown()
		return nil, fmt.Errorf("natstest: server on port %d not ready in 10s", o.Port)
	}
	o.Port = s.Addr().(*net.TCPAddr).Port
	return &Server{s: s, opts: o}, nil
}

// URL is the client URL (nats://127.0.0.1:port, tls:// with Options.TLS), without credentials.
func (s *Server) URL() string {
	scheme := "nats://"
	if s.opts.TLS != nil {
		scheme = "tls://"
	}
	return scheme + "127.0.0.1:" + strconv.Itoa(s.opts.Port)
}

// Port is the bound client port.
func (s *Server) Port() int { return s.opts.Port }

// Options are the server's options with the bound port: Start(s.Options()) after Stop brings
// the same server back on the same port (a bus outage in a test).
func (s *Server) Options() Options { return s.opts }

// Clients is the number of connected clients.
func (s *Server) Clients() int { return s.s.NumClients() }

// Stop shuts the server down and waits until it has stopped; clients see their connection drop.
func (s *Server) Stop() {
	s.s.Shutdown()
	s.s.WaitForShutdown()
}
