package simpleworkflow_test

import (
	"bytes"
	"io"
	"net"
	"net/url"
	"sync"
	"testing"
)

// gateProxy is a TCP proxy in front of Postgres that can hold back the
// server's replies that contain a marker, so a test can let a statement
// commit on the server while its client waits for the answer.
type gateProxy struct {
	addr     string
	mu       sync.Mutex
	marker   []byte
	released chan struct{}
}

// startGateProxy proxies to the host and port of databaseURL and returns
// the proxy with a URL that connects through it.
func startGateProxy(t *testing.T, databaseURL string) (*gateProxy, string) {
	t.Helper()
	u, err := url.Parse(databaseURL)
	if err != nil {
		t.Fatal(err)
	}
	upstream := u.Host
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = l.Close() })
	p := &gateProxy{addr: l.Addr().String()}
	go func() {
		for {
			c, err := l.Accept()
			if err != nil {
				return
			}
			go p.serve(c, upstream)
		}
	}()
	u.Host = p.addr
	return p, u.String()
}

func (p *gateProxy) serve(client net.Conn, upstream string) {
	defer client.Close()
	server, err := net.Dial("tcp", upstream)
	if err != nil {
		return
	}
	defer server.Close()
	go func() {
		_, _ = io.Copy(server, client)
		_ = server.Close()
	}()
	buf := make([]byte, 32<<10)
	for {
		n, err := server.Read(buf)
		if n > 0 {
			p.mu.Lock()
			marker, released := p.marker, p.released
			p.mu.Unlock()
			if marker != nil && bytes.Contains(buf[:n], marker) {
				<-released
			}
			if _, werr := client.Write(buf[:n]); werr != nil {
				return
			}
		}
		if err != nil {
			return
		}
	}
}

// hold holds back every reply that contains marker until release.
func (p *gateProxy) hold(marker string) {
	p.mu.Lock()
	defer p.mu.Unlock()
	p.marker, p.released = []byte(marker), make(chan struct{})
}

// release lets the held replies through and holds nothing more.
func (p *gateProxy) release() {
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.released != nil {
		close(p.released)
	}
	p.marker, p.released = nil, nil
}
