package console

import (
	"context"
	"errors"
	"net/http"
	"net/url"
	"strings"
	"time"
	"unicode"
	"unicode/utf8"
)

// tokenCookie holds a token entered on the login page: HttpOnly (no script
// reads it), SameSite=Strict (no other site's page sends it), Secure when
// the console is reached over TLS.
const tokenCookie = "sw_console_token"

// tokenCookieLife is how long a browser keeps the token; the token's own
// expiry and the API server's word still apply to every request.
const tokenCookieLife = 8 * time.Hour

// maxTokenBytes bounds a token: Kubernetes' are a few kilobytes.
const maxTokenBytes = 16 << 10

type accessKey struct{}

// accessOf returns the viewer's access stored by authorize.
func accessOf(ctx context.Context) access {
	if a, ok := ctx.Value(accessKey{}).(access); ok {
		return a
	}
	return access{} // nothing, should a handler run unguarded
}

// bearerToken returns the request's token: the Authorization header's, else
// the login cookie's.
func bearerToken(r *http.Request) string {
	if h := r.Header.Get("Authorization"); h != "" {
		if scheme, tok, ok := strings.Cut(h, " "); ok && strings.EqualFold(scheme, "Bearer") {
			return strings.TrimSpace(tok)
		}
		return ""
	}
	if c, err := r.Cookie(tokenCookie); err == nil {
		return c.Value
	}
	return ""
}

// authorize finds out what the request's sender may read and passes the
// request on with it; a request without a valid token gets 401.
func (s *Server) authorize(w http.ResponseWriter, r *http.Request, next http.Handler) {
	if s.gate == nil {
		next.ServeHTTP(w, r.WithContext(context.WithValue(r.Context(), accessKey{}, everything)))
		return
	}
	token := bearerToken(r)
	a, err := s.accessFor(r.Context(), token)
	a.csrf, a.byHeader = csrfOf(token), r.Header.Get("Authorization") != ""
	switch {
	case errors.Is(err, ErrUnauthenticated):
		s.unauthorized(w, r)
		return
	case err != nil:
		s.fail(w, r, http.StatusServiceUnavailable, "The Kubernetes API server could not check your token; try again.", err)
		return
	}
	next.ServeHTTP(w, r.WithContext(context.WithValue(r.Context(), accessKey{}, a)))
}

// accessFor returns what the holder of token may read.
func (s *Server) accessFor(ctx context.Context, token string) (access, error) {
	if token == "" || len(token) > maxTokenBytes {
		return access{}, ErrUnauthenticated
	}
	namespaces, err := s.knownNamespaces(ctx)
	if err != nil {
		return access{}, err
	}
	return s.gate.access(ctx, token, namespaces)
}

// unauthorized answers 401: a page with the login form's address for a
// browser, a line for anything else.
func (s *Server) unauthorized(w http.ResponseWriter, r *http.Request) {
	if strings.Contains(r.Header.Get("Accept"), "text/html") && r.URL.Path != "/live" {
		s.render(w, r, "login", http.StatusUnauthorized, page{Title: "Log in",
			Data: loginView{Next: localNext(r.URL.RequestURI()), Error: "Log in with a Kubernetes token to read the inbox."}})
		return
	}
	w.Header().Set("WWW-Authenticate", `Bearer realm="simple-workflow console"`)
	http.Error(w, "a Kubernetes bearer token is required (Authorization: Bearer <token>, or log in at /login)", http.StatusUnauthorized)
}

// loginView is what the login page shows.
type loginView struct {
	Next  string
	Error string
}

// sameOrigin reports whether a form was posted by the console's own page:
// browsers say where a POST comes from (Sec-Fetch-Site, Origin); a request
// that says neither is refused too.
func sameOrigin(r *http.Request) bool {
	if site := r.Header.Get("Sec-Fetch-Site"); site != "" {
		return site == "same-origin"
	}
	origin := r.Header.Get("Origin")
	if origin == "" {
		return false
	}
	u, err := url.Parse(origin)
	return err == nil && strings.EqualFold(u.Host, r.Host)
}

// localNext returns next when it is a path of this console, else "/": a
// login must not send the browser to another site (an open redirect).
func localNext(next string) string {
	if !isLocalPath(next) {
		return "/"
	}
	return next
}

// isLocalPath reports whether next is a path of this console other than the
// login page, as a browser would read it. Browsers drop tabs and newlines
// from a URL and read a backslash as a slash, so "/\t/evil.example" and
// "/\\evil.example" lead to evil.example: a next with a control character or
// a backslash is refused, in its path also once decoded ("/%5C", "/%00"), as
// is one that names a scheme or a host, or whose path begins with "//".
func isLocalPath(next string) bool {
	if !strings.HasPrefix(next, "/") || strings.HasPrefix(next, "/login") ||
		!utf8.ValidString(next) || strings.ContainsFunc(next, unsafeInNext) {
		return false
	}
	u, err := url.Parse(next)
	if err != nil || u.Scheme != "" || u.Opaque != "" || u.User != nil || u.Host != "" {
		return false
	}
	return strings.HasPrefix(u.Path, "/") && !strings.HasPrefix(u.Path, "//") && !strings.HasPrefix(u.Path, "/login") &&
		!strings.ContainsFunc(u.Path, unsafeInNext)
}

// unsafeInNext reports whether a browser may drop r from a URL or read it as
// a slash: a control character (below 0x20, DEL, C1) or a backslash.
func unsafeInNext(r rune) bool { return unicode.IsControl(r) || r == '\\' }

func (s *Server) serveLoginForm(w http.ResponseWriter, r *http.Request) {
	s.render(w, r, "login", http.StatusOK, page{Title: "Log in", Data: loginView{Next: localNext(r.URL.Query().Get("next"))}})
}

// serveLogin checks a pasted token and keeps it in the login cookie.
func (s *Server) serveLogin(w http.ResponseWriter, r *http.Request) {
	if !sameOrigin(r) {
		http.Error(w, "the login form must be posted from the console's own page", http.StatusForbidden)
		return
	}
	r.Body = http.MaxBytesReader(w, r.Body, 2*maxTokenBytes)
	if err := r.ParseForm(); err != nil {
		http.Error(w, "the form could not be read", http.StatusBadRequest)
		return
	}
	token, next := strings.TrimSpace(r.PostForm.Get("token")), localNext(r.PostForm.Get("next"))
	if s.gate == nil {
		http.Redirect(w, r, next, http.StatusSeeOther)
		return
	}
	_, err := s.accessFor(r.Context(), token)
	switch {
	case errors.Is(err, ErrUnauthenticated):
		s.render(w, r, "login", http.StatusUnauthorized, page{Title: "Log in",
			Data: loginView{Next: next, Error: "That token does not authenticate anyone: it is unknown, expired or revoked."}})
		return
	case err != nil:
		s.fail(w, r, http.StatusServiceUnavailable, "The Kubernetes API server could not check your token; try again.", err)
		return
	}
	http.SetCookie(w, &http.Cookie{Name: tokenCookie, Value: token, Path: "/", MaxAge: int(tokenCookieLife / time.Second),
		HttpOnly: true, SameSite: http.SameSiteStrictMode, Secure: viaTLS(r)})
	http.Redirect(w, r, next, http.StatusSeeOther)
}

// serveLogout forgets the login cookie.
func (s *Server) serveLogout(w http.ResponseWriter, r *http.Request) {
	if !sameOrigin(r) {
		http.Error(w, "the logout form must be posted from the console's own page", http.StatusForbidden)
		return
	}
	http.SetCookie(w, &http.Cookie{Name: tokenCookie, Value: "", Path: "/", MaxAge: -1,
		HttpOnly: true, SameSite: http.SameSiteStrictMode, Secure: viaTLS(r)})
	http.Redirect(w, r, "/login", http.StatusSeeOther)
}

// viaTLS reports whether the browser reached the console over TLS (directly
// or through a proxy that says so).
func viaTLS(r *http.Request) bool {
	return r.TLS != nil || strings.EqualFold(r.Header.Get("X-Forwarded-Proto"), "https")
}
