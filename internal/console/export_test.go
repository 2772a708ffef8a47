package console

import (
	"context"
	"time"
)

// ForgetOverview drops the cached overview, so that the next request reads
// it from the database.
func (s *Server) ForgetOverview() {
	s.cache.mu.Lock()
	defer s.cache.mu.Unlock()
	s.cache.at = time.Time{}
}

// Listening reports whether the console's listener has connected and
// listens for the inbox's notifications.
func (s *Server) Listening() bool {
	s.hub.mu.Lock()
	defer s.hub.mu.Unlock()
	return s.hub.listening
}

// HeardSince reports whether a notification arrived after t.
func (s *Server) HeardSince(t time.Time) bool {
	s.hub.mu.Lock()
	defer s.hub.mu.Unlock()
	return s.hub.lastNotified.After(t)
}

// RefreshInboxes reads the list of inboxes now, as the console does every
// few seconds.
func (s *Server) RefreshInboxes(ctx context.Context) { s.inboxes.refresh(ctx) }

// CSRFOf is the form token of a bearer token's holder.
var CSRFOf = csrfOf
