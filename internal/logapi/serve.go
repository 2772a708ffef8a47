package logapi

import (
	"context"
	"crypto/tls"
	"errors"
	"fmt"
	"log"
	"log/slog"
	"net"
	"net/http"
	"os"
	"path/filepath"
	"sync"
	"time"
)

// The files of the serving certificate in its directory (a
// kubernetes.io/tls Secret's keys).
const (
	certFile = "tls.crt"
	keyFile  = "tls.key"
)

// How often the request-header settings are read again, and how soon
// after a failed read.
const (
	refreshInterval = time.Minute
	refreshRetry    = 5 * time.Second
)

// Serve serves the log API over TLS on addr, with the certificate and key
// in certDir (tls.crt and tls.key, read again when they change), until ctx
// ends. It reads the request-header settings at once and then every minute.
func (s *Server) Serve(ctx context.Context, addr, certDir string) error {
	certs := &certFiles{cert: filepath.Join(certDir, certFile), key: filepath.Join(certDir, keyFile), log: s.cfg.Logger}
	if _, err := certs.load(); err != nil {
		return err
	}
	ln, err := net.Listen("tcp", addr)
	if err != nil {
		return fmt.Errorf("log API: listen on %s: %w", addr, err)
	}
	srv := &http.Server{
		Handler:           s,
		ReadHeaderTimeout: 10 * time.Second,
		// A reader that does not read its answer gives up its slot.
		WriteTimeout: time.Minute,
		IdleTimeout:  90 * time.Second,
		TLSConfig: &tls.Config{
			MinVersion:     tls.VersionTLS12,
			GetCertificate: certs.get,
			// Verified per request against the CA the API server
			// publishes, which may rotate.
			ClientAuth: tls.RequestClientCert,
			NextProtos: []string{"http/1.1"},
		},
		ErrorLog: log.New(slogWriter{s.cfg.Logger}, "", 0),
	}
	go s.refreshLoop(ctx)
	go func() {
		<-ctx.Done()
		sctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
		defer cancel()
		_ = srv.Shutdown(sctx)
	}()
	s.cfg.Logger.Info("Serving the log API", "address", ln.Addr().String())
	if err := srv.ServeTLS(ln, "", ""); err != nil && !errors.Is(err, http.ErrServerClosed) {
		return fmt.Errorf("log API: %w", err)
	}
	return nil
}

// refreshLoop reads the request-header settings until ctx ends: at once,
// again soon after a failure, and every minute.
func (s *Server) refreshLoop(ctx context.Context) {
	for {
		wait := refreshInterval
		if err := s.Refresh(ctx); err != nil {
			if ctx.Err() != nil {
				return
			}
			s.cfg.Logger.Error("Log API could not read the API server's request-header settings", "error", err)
			wait = refreshRetry
		}
		select {
		case <-ctx.Done():
			return
		case <-time.After(wait):
		}
	}
}

// certFiles is a serving certificate read from files, read again when
// they change (a mounted Secret renewed), at most every ten seconds.
type certFiles struct {
	cert, key string
	log       *slog.Logger

	mu      sync.Mutex
	current *tls.Certificate
	mod     [2]time.Time
	checked time.Time
}

// get is tls.Config.GetCertificate.
func (c *certFiles) get(*tls.ClientHelloInfo) (*tls.Certificate, error) {
	c.mu.Lock()
	stale := time.Since(c.checked) > 10*time.Second
	current := c.current
	c.mu.Unlock()
	if !stale {
		return current, nil
	}
	cert, err := c.load()
	if err != nil {
		c.log.Error("Log API keeps its serving certificate: the files could not be read again", "error", err)
		return current, nil
	}
	return cert, nil
}

// load reads the files when they changed since last read.
func (c *certFiles) load() (*tls.Certificate, error) {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.checked = time.Now()
	var mod [2]time.Time
	for i, p := range []string{c.cert, c.key} {
		fi, err := os.Stat(p)
		if err != nil {
			return nil, fmt.Errorf("log API serving certificate: %w", err)
		}
		mod[i] = fi.ModTime()
	}
	if c.current != nil && mod == c.mod {
		return c.current, nil
	}
	cert, err := tls.LoadX509KeyPair(c.cert, c.key)
	if err != nil {
		return nil, fmt.Errorf("log API serving certificate %s, %s: %w", c.cert, c.key, err)
	}
	c.current, c.mod = &cert, mod
	return c.current, nil
}

// slogWriter writes the HTTP server's own messages (TLS handshake errors)
// to the logger, at debug level: a scanner or a probe makes them.
type slogWriter struct{ l *slog.Logger }

func (w slogWriter) Write(p []byte) (int, error) {
	w.l.Debug(string(p))
	return len(p), nil
}
