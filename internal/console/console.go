package console

import (
	"context"
	"embed"
	"errors"
	"fmt"
	"html/template"
	"io/fs"
	"log/slog"
	"net"
	"net/http"
	"strings"
	"time"

	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/simple-workflow/simple-workflow/internal/engine"
)

//go:embed templates/*.html
var templateFiles embed.FS

//go:embed static
var staticFiles embed.FS

// Config configures a console.
type Config struct {
	// DB is the console's read-only pool (see OpenPool) of the default
	// inbox.
	DB *pgxpool.Pool
	// Inboxes lists the inboxes besides the default one (the
	// WorkflowInboxes); nil reads the default inbox alone.
	Inboxes InboxLister
	// Role is the database role the console reads the listed inboxes as
	// (see OpenReadPool); empty reads as each URL's login user, still in
	// read-only transactions.
	Role string
	// Pools lists the worker pools for the overview; nil shows none.
	Pools PoolLister
	// Logger receives the console's errors; nil discards them.
	Logger *slog.Logger
	// AllowedHosts are host names (besides IP addresses, localhost and the
	// cluster's service names, *.svc and *.svc.<domain>) that requests may
	// name in their Host header; others are refused, so a web page cannot
	// reach the console through a name it rebinds to a local address.
	AllowedHosts []string
	// Auth checks every request's Kubernetes bearer token and what its
	// holder may read (KubeReviewer). Required unless Unauthenticated.
	Auth Reviewer
	// Unauthenticated serves everyone everything, without asking who they
	// are: only for a trusted network (--console-auth=none). Every page
	// says so.
	Unauthenticated bool
	// AuthTTL is how long a token's review and its holder's permissions
	// are trusted; DefaultAuthTTL when zero.
	AuthTTL time.Duration
	// Actor writes the actions (cancel, retry, signal) a viewer allowed
	// to patch a run's WorkflowRuns makes; nil: the console only reads.
	// Actions need Auth (an unauthenticated console makes none).
	Actor Actor
}

// Server serves the console.
type Server struct {
	// def is the default inbox; inboxes holds it and the others.
	def     *source
	inboxes *inboxes
	pools   PoolLister
	// actor writes the actions; nil when the console only reads.
	actor Actor
	log   *slog.Logger
	pages map[string]*template.Template
	hub   *hub
	mux   *http.ServeMux
	hosts map[string]bool
	cache overviewCache
	// gate authenticates and authorizes each request; nil when the console
	// is unauthenticated.
	gate       *gate
	namespaces namespaceCache
	scoped     scopedOverviews
	recheck    time.Duration
}

// New returns a console reading through cfg.DB.
func New(cfg Config) (*Server, error) {
	if cfg.DB == nil {
		return nil, errors.New("console: no database pool")
	}
	if cfg.Auth == nil && !cfg.Unauthenticated {
		return nil, errors.New("console: no way to authenticate requests: give it a Kubernetes reviewer, or mark it unauthenticated for a trusted network")
	}
	eng, err := engine.New(cfg.DB)
	if err != nil {
		return nil, fmt.Errorf("console: %w", err)
	}
	log := cfg.Logger
	if log == nil {
		log = slog.New(slog.DiscardHandler)
	}
	pages, err := parsePages()
	if err != nil {
		return nil, fmt.Errorf("console: %w", err)
	}
	def := &source{name: DefaultInbox, db: cfg.DB, eng: eng}
	s := &Server{def: def, inboxes: newInboxes(def, cfg.Inboxes, cfg.Role, log), pools: cfg.Pools, log: log, actor: cfg.Actor,
		pages: pages, hub: newHub(), mux: http.NewServeMux(), hosts: map[string]bool{}}
	s.inboxes.listen = s.listenInbox
	for _, h := range cfg.AllowedHosts {
		s.hosts[strings.ToLower(h)] = true
	}
	s.recheck = DefaultAuthTTL
	if !cfg.Unauthenticated {
		s.gate = newGate(cfg.Auth, cfg.AuthTTL)
		s.recheck = s.gate.ttl
	}
	static, err := fs.Sub(staticFiles, "static")
	if err != nil {
		return nil, fmt.Errorf("console: %w", err)
	}
	files := http.StripPrefix("/static/", http.FileServerFS(static))
	s.mux.HandleFunc("GET /static/", func(w http.ResponseWriter, r *http.Request) {
		if strings.HasSuffix(r.URL.Path, "/") {
			http.NotFound(w, r) // no directory listings
			return
		}
		files.ServeHTTP(w, r)
	})
	s.mux.HandleFunc("GET /{$}", s.serveOverview)
	s.mux.HandleFunc("GET /runs", s.serveRuns)
	s.mux.HandleFunc("GET /runs/{id}", s.serveRun)
	s.mux.HandleFunc("GET /runs/{id}/log", s.serveRunLog)
	s.mux.HandleFunc("POST /runs/{id}/{action}", s.serveRunAction)
	s.mux.HandleFunc("GET /runs/bulk", s.serveBulk)
	s.mux.HandleFunc("POST /runs/bulk", s.serveBulk)
	s.mux.HandleFunc("GET /schedules", s.serveSchedules)
	s.mux.HandleFunc("GET /schedules/{namespace}/{name}", s.serveSchedule)
	s.mux.HandleFunc("GET /live", s.serveLive)
	return s, nil
}

// ServeHTTP serves the console's pages with headers that keep a browser
// from running anything the pages did not bring themselves.
func (s *Server) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	h := w.Header()
	h.Set("Content-Security-Policy", "default-src 'none'; script-src 'self'; style-src 'self'; img-src 'self'; connect-src 'self'; form-action 'self'; base-uri 'none'; frame-ancestors 'none'")
	h.Set("X-Content-Type-Options", "nosniff")
	h.Set("Referrer-Policy", "no-referrer")
	h.Set("X-Frame-Options", "DENY")
	if !s.hostAllowed(r.Host) {
		http.Error(w, "the console does not answer to this host name; add it with --console-allowed-hosts", http.StatusMisdirectedRequest)
		return
	}
	read := r.Method == http.MethodGet || r.Method == http.MethodHead
	switch {
	case r.URL.Path == "/login" && read:
		s.serveLoginForm(w, r)
	case r.URL.Path == "/login" && r.Method == http.MethodPost:
		s.serveLogin(w, r)
	case r.URL.Path == "/logout" && r.Method == http.MethodPost:
		s.serveLogout(w, r)
	case r.Method == http.MethodPost && actionPath(r.URL.Path):
		s.authorize(w, r, s.mux)
	case !read:
		h.Set("Allow", "GET, HEAD")
		http.Error(w, "the console only reads, but for the actions on runs (POST /runs/{id}/cancel, retry, signal; /runs/bulk)", http.StatusMethodNotAllowed)
	case strings.HasPrefix(r.URL.Path, "/static/"):
		s.mux.ServeHTTP(w, r)
	default:
		s.authorize(w, r, s.mux)
	}
}

// hostAllowed reports whether a request's Host may reach the console: an IP
// address, localhost, a cluster service name (*.svc, *.svc.cluster.local) or
// a configured name.
func (s *Server) hostAllowed(hostport string) bool {
	host := hostport
	if h, _, err := net.SplitHostPort(hostport); err == nil {
		host = h
	}
	host = strings.ToLower(strings.TrimSuffix(strings.Trim(host, "[]"), "."))
	switch {
	case host == "":
		return false
	case net.ParseIP(host) != nil, host == "localhost", strings.HasSuffix(host, ".localhost"):
		return true
	case strings.HasSuffix(host, ".svc"), strings.HasSuffix(host, ".svc.cluster.local"):
		// A Service's name in the cluster; another cluster domain is named
		// with --console-allowed-hosts (a name merely holding ".svc." may
		// be anyone's).
		return true
	}
	return s.hosts[host]
}

// Serve serves the console on addr, with its live updates (LISTEN on the
// inbox's channels), until ctx ends; then it closes the open streams and
// returns nil.
func (s *Server) Serve(ctx context.Context, addr string) error {
	l, err := net.Listen("tcp", addr)
	if err != nil {
		return fmt.Errorf("console: listen on %s: %w", addr, err)
	}
	return s.ServeListener(ctx, l)
}

// ServeListener is Serve on a listener the caller opened.
func (s *Server) ServeListener(ctx context.Context, l net.Listener) error {
	srv := &http.Server{
		Handler:           s,
		ReadHeaderTimeout: 10 * time.Second,
		IdleTimeout:       2 * time.Minute,
		MaxHeaderBytes:    64 << 10,
		BaseContext:       func(net.Listener) context.Context { return ctx },
	}
	go func() { _ = s.run(ctx) }()
	go func() {
		<-ctx.Done()
		shutdown, cancel := context.WithTimeout(context.WithoutCancel(ctx), 5*time.Second)
		defer cancel()
		_ = srv.Shutdown(shutdown)
	}()
	s.log.Info("Serving the console", "address", l.Addr().String())
	if err := srv.Serve(l); err != nil && !errors.Is(err, http.ErrServerClosed) {
		return fmt.Errorf("console: %w", err)
	}
	return nil
}
