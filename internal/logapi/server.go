package logapi

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"net/http"
	"sync"
	"time"

	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/simple-workflow/simple-workflow/internal/engine"
	logsv1alpha1 "github.com/simple-workflow/simple-workflow/internal/logapi/v1alpha1"
)

// Inbox is what the log API reads of an inbox (an *engine.Engine).
type Inbox interface {
	SourcesOf(ctx context.Context, ids []string) ([]engine.MirroredRun, error)
	RunLogAttempts(ctx context.Context, runID string) ([]engine.AttemptLogSummary, error)
	RunLogs(ctx context.Context, runID string, afterAttempt int, afterSeq int64, limit int) ([]engine.RunLogLine, error)
}

// Inboxes finds the inbox serving a namespace.
type Inboxes interface {
	// InboxFor returns the inbox whose database holds the runs of
	// namespace, or why it cannot be read now.
	InboxFor(ctx context.Context, namespace string) (Inbox, error)
}

// Config is what a Server needs.
type Config struct {
	// Kube reads the ConfigMap kube-system/extension-apiserver-authentication
	// and creates SubjectAccessReviews, as the manager.
	Kube kubernetes.Interface
	// Runs reads WorkflowRuns.
	Runs client.Reader
	// Inboxes finds the inbox of a namespace.
	Inboxes Inboxes
	// Logger logs refusals and failures; nil discards them.
	Logger *slog.Logger
	// Timeout bounds the reads of one request (10 seconds when 0).
	Timeout time.Duration
	// MaxInFlight bounds the log reads served at once (4 when 0); more
	// are answered 429 with Retry-After.
	MaxInFlight int
}

// maxLogBytes bounds the message octets one response carries: older lines
// past it are counted as omitted (ask a smaller tail, or an attempt).
const maxLogBytes = 4 << 20

// Server serves the log API. Use it as an http.Handler (the requests must
// come over TLS, with the API server's client certificate) or with Serve.
type Server struct {
	cfg Config
	mux *http.ServeMux

	// slots bounds the log reads in flight.
	slots chan struct{}

	mu sync.RWMutex
	rh *requestHeader
	// rhErr is why rh could not be read (the last time).
	rhErr error
}

// New returns a server; it refuses every request until Refresh has read
// the API server's request-header settings once.
func New(cfg Config) (*Server, error) {
	if cfg.Kube == nil || cfg.Runs == nil || cfg.Inboxes == nil {
		return nil, errors.New("log API: Kube, Runs and Inboxes are required")
	}
	if cfg.Logger == nil {
		cfg.Logger = slog.New(slog.DiscardHandler)
	}
	if cfg.Timeout <= 0 {
		cfg.Timeout = 10 * time.Second
	}
	if cfg.MaxInFlight <= 0 {
		cfg.MaxInFlight = 4
	}
	s := &Server{cfg: cfg, mux: http.NewServeMux(), rhErr: errors.New("not read yet"),
		slots: make(chan struct{}, cfg.MaxInFlight)}
	base := "/apis/" + logsv1alpha1.Group
	s.mux.HandleFunc("/apis", discoveryOnly(serveGroupList))
	s.mux.HandleFunc(base, discoveryOnly(serveGroup))
	s.mux.HandleFunc(base+"/"+logsv1alpha1.Version, discoveryOnly(serveResources))
	s.mux.HandleFunc(base+"/"+logsv1alpha1.Version+"/namespaces/{namespace}/"+logsv1alpha1.Resource+"/{name}", s.serveRunLog)
	s.mux.HandleFunc(base+"/"+logsv1alpha1.Version+"/namespaces/{namespace}/"+logsv1alpha1.Resource, func(w http.ResponseWriter, r *http.Request) {
		writeStatus(w, apierrors.NewMethodNotSupported(logsResource, "list"))
	})
	s.mux.HandleFunc("/", func(w http.ResponseWriter, r *http.Request) {
		writeStatus(w, &apierrors.StatusError{ErrStatus: metav1.Status{Status: metav1.StatusFailure, Code: http.StatusNotFound,
			Reason: metav1.StatusReasonNotFound, Message: "the server could not find the requested resource"}})
	})
	return s, nil
}

// discoveryOnly serves a discovery document to GET requests only.
func discoveryOnly(h http.HandlerFunc) http.HandlerFunc {
	return func(w http.ResponseWriter, r *http.Request) {
		if r.Method != http.MethodGet && r.Method != http.MethodHead {
			writeStatus(w, apierrors.NewMethodNotSupported(logsResource, r.Method))
			return
		}
		h(w, r)
	}
}

// Refresh reads the API server's request-header settings again (a CA or
// header rotated); on failure the settings read before are kept.
func (s *Server) Refresh(ctx context.Context) error {
	rh, err := loadRequestHeader(ctx, s.cfg.Kube)
	s.mu.Lock()
	defer s.mu.Unlock()
	if err != nil {
		s.rhErr = err
		return err
	}
	s.rh, s.rhErr = rh, nil
	return nil
}

// requestHeader returns the settings read last, or why there are none.
func (s *Server) requestHeader() (*requestHeader, error) {
	s.mu.RLock()
	defer s.mu.RUnlock()
	return s.rh, s.rhErr
}

// userKey is the context key of the request's User.
type userKey struct{}

// ServeHTTP authenticates the request (the API server's client
// certificate; the user from its headers) and serves it.
func (s *Server) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	rh, err := s.requestHeader()
	if rh == nil {
		s.cfg.Logger.Debug("Log API refused a request: the API server's request-header settings are not read", "error", err)
		writeStatus(w, unavailable("the log API has not read the API server's request-header settings yet"))
		return
	}
	if !rh.verified(r) {
		// Debug: anyone reaching the port may send these.
		s.cfg.Logger.Debug("Log API refused a request not from the API server", "remote", r.RemoteAddr, "path", r.URL.Path)
		writeStatus(w, apierrors.NewUnauthorized(fmt.Sprintf("the log API answers the API server only: %v", errNoClientCert)))
		return
	}
	u := rh.user(r.Header)
	s.mux.ServeHTTP(w, r.WithContext(context.WithValue(r.Context(), userKey{}, u)))
}

// userOf is the request's user, as ServeHTTP read it.
func userOf(ctx context.Context) User {
	u, _ := ctx.Value(userKey{}).(User)
	return u
}
