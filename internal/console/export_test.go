package console

import "time"

// ForgetOverview drops the cached overview, so that the next request reads
// it from the database.
func (s *Server) ForgetOverview() {
	s.cache.mu.Lock()
	defer s.cache.mu.Unlock()
	s.cache.at = time.Time{}
}
