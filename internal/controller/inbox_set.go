package controller

import (
	"context"
	"crypto/sha256"
	"fmt"
	"slices"
	"sync"
	"time"

	"github.com/go-logr/logr"
	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/prometheus/client_golang/prometheus"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/labels"
	"sigs.k8s.io/controller-runtime/pkg/client"

	workflowv1alpha1 "github.com/simple-workflow/simple-workflow/api/v1alpha1"
	"github.com/simple-workflow/simple-workflow/internal/engine"
)

const (
	defaultInbox       = workflowv1alpha1.DefaultInboxName
	reasonNotYetPlaced = workflowv1alpha1.ReasonNamespaceNotYetPlaced
	// inboxPingInterval is how often each inbox's database is pinged.
	inboxPingInterval = 2 * time.Second
	// inboxPingTimeout bounds one ping.
	inboxPingTimeout = 2 * time.Second
)

// ServeInbox runs what the manager does for one inbox (its LISTEN, its
// maintenance, its autoscaler) until ctx ends.
type ServeInbox func(ctx context.Context, name string, eng *engine.Engine)

// InboxSet holds the manager's inboxes: the default one and one per
// WorkflowInbox, and says which serves a namespace. The WorkflowInbox
// controller connects and disconnects the named ones; the placement of
// namespaces is read from the WorkflowInboxes' status, so every manager
// (and every restart) routes the same way.
type InboxSet struct {
	reader client.Reader
	log    logr.Logger
	serve  ServeInbox

	mu    sync.RWMutex
	conns map[string]*inboxConn
	// moving: namespaces about to move, which take no new runs meanwhile.
	moving map[string]bool
	// tried: the named inboxes the manager tried to connect since it
	// started (one not tried yet is not reported unavailable).
	tried map[string]bool
	// fences: per namespace, held by reconcile passes, taken by a move.
	fences map[string]*sync.RWMutex
	// recoveries counts, per inbox, the times its database answered again.
	recoveries map[string]int
	// base is the manager's context: the loops of every inbox end with it.
	base context.Context
	// upChanged is told the name of an inbox whose health changed.
	upChanged chan string
	metrics   *Metrics
}

// inboxConn is one connected inbox.
type inboxConn struct {
	name   string
	pool   *pgxpool.Pool
	eng    *engine.Engine
	source [32]byte // hash of the URL it was opened with
	schema int
	// identity names its database (engine.DatabaseIdentity); the default
	// inbox's is read when first needed (under mu).
	identity string
	stop     context.CancelFunc
	done     chan struct{}

	mu    sync.Mutex
	up    bool
	cause error
}

// NewInboxSet returns a set whose default inbox is eng. reader reads
// Namespaces and WorkflowInboxes (the manager's cached client); serve runs
// the per-inbox loops of a named inbox; metrics is optional.
func NewInboxSet(reader client.Reader, eng *engine.Engine, serve ServeInbox, log logr.Logger, metrics *Metrics) *InboxSet {
	s := &InboxSet{reader: reader, log: log, serve: serve, conns: map[string]*inboxConn{},
		moving: map[string]bool{}, tried: map[string]bool{}, fences: map[string]*sync.RWMutex{},
		recoveries: map[string]int{}, base: context.Background(),
		upChanged: make(chan string, 64), metrics: metrics}
	s.conns[defaultInbox] = &inboxConn{name: defaultInbox, eng: eng, up: true}
	return s
}

// UpChanged delivers the name of an inbox whose database went down or
// came back.
func (s *InboxSet) UpChanged() <-chan string { return s.upChanged }

// Start pings the default inbox until ctx ends (the named ones are pinged
// by their own loops); a manager Runnable.
func (s *InboxSet) Start(ctx context.Context) error {
	s.mu.Lock()
	c := s.conns[defaultInbox]
	s.base = ctx
	s.mu.Unlock()
	s.pingLoop(ctx, c, func(ctx context.Context) error { return c.eng.Ping(ctx) })
	return nil
}

// For returns the inbox serving namespace, for a look that writes nothing
// (Enter is for a reconcile's pass). An inbox that is connected is
// returned even while its database does not answer.
func (s *InboxSet) For(ctx context.Context, namespace string) (Inbox, string, error) {
	s.mu.RLock()
	moving := s.moving[namespace]
	s.mu.RUnlock()
	if moving {
		return nil, "", errMoving(namespace)
	}
	return s.route(ctx, namespace)
}

// Placed names the inbox serving namespace, whether this manager is
// connected to it or not (a standby connects to no WorkflowInbox): readers
// that open their own connections route with it. The error is an
// *InboxUnavailableError while the namespace is moving or not yet placed.
func (s *InboxSet) Placed(ctx context.Context, namespace string) (string, error) {
	s.mu.RLock()
	moving := s.moving[namespace]
	s.mu.RUnlock()
	if moving {
		return "", errMoving(namespace)
	}
	return s.placed(ctx, namespace)
}

// Enter returns the inbox serving namespace for one reconcile's pass and
// holds the namespace where it is until release is called: a namespace
// moves only when no pass holds it (see fenceForMove).
func (s *InboxSet) Enter(ctx context.Context, namespace string) (Inbox, string, func(), error) {
	f := s.fence(namespace)
	if !f.TryRLock() {
		return nil, "", nil, errMoving(namespace)
	}
	inbox, name, err := s.For(ctx, namespace)
	if err != nil {
		f.RUnlock()
		return nil, name, nil, err
	}
	return inbox, name, f.RUnlock, nil
}

// fence is the namespace's lock between passes (readers) and a move.
func (s *InboxSet) fence(namespace string) *sync.RWMutex {
	s.mu.Lock()
	defer s.mu.Unlock()
	f := s.fences[namespace]
	if f == nil {
		f = &sync.RWMutex{}
		s.fences[namespace] = f
	}
	return f
}

// fenceForMove waits up to wait for the passes holding namespace to end and
// holds off new ones until unlock is called; ok is false when passes still
// hold it.
func (s *InboxSet) fenceForMove(namespace string, wait time.Duration) (unlock func(), ok bool) {
	f := s.fence(namespace)
	for deadline := time.Now().Add(wait); ; {
		if f.TryLock() {
			return f.Unlock, true
		}
		if time.Now().After(deadline) {
			return nil, false
		}
		time.Sleep(20 * time.Millisecond)
	}
}

func errMoving(namespace string) error {
	return &InboxUnavailableError{Namespace: namespace, Reason: reasonNotYetPlaced,
		Err: fmt.Errorf("it is moving to another inbox"), Brief: true}
}

// route names and returns the inbox placed for namespace.
func (s *InboxSet) route(ctx context.Context, namespace string) (Inbox, string, error) {
	name, err := s.placed(ctx, namespace)
	if err != nil {
		return nil, name, err
	}
	s.mu.RLock()
	c := s.conns[name]
	s.mu.RUnlock()
	if c == nil {
		s.mu.RLock()
		tried := s.tried[name]
		s.mu.RUnlock()
		return nil, name, &InboxUnavailableError{Inbox: name, Namespace: namespace, Reason: workflowv1alpha1.ReasonInboxUnavailable,
			Err: fmt.Errorf("not connected (its WorkflowInbox's Ready condition says why)"), Brief: !tried}
	}
	return c.eng, name, nil
}

// setMoving marks namespace as about to move (no new runs) or not.
func (s *InboxSet) setMoving(namespace string, moving bool) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if moving {
		s.moving[namespace] = true
	} else {
		delete(s.moving, namespace)
	}
}

// Engine returns the engine of the named inbox, whatever its health, and
// whether it is connected.
func (s *InboxSet) Engine(name string) (*engine.Engine, bool) {
	s.mu.RLock()
	defer s.mu.RUnlock()
	c := s.conns[name]
	if c == nil {
		return nil, false
	}
	return c.eng, true
}

// Up reports whether the named inbox is connected and its database
// answered the last ping, and the cause when not.
func (s *InboxSet) Up(name string) (bool, error) {
	s.mu.RLock()
	c := s.conns[name]
	s.mu.RUnlock()
	if c == nil {
		return false, fmt.Errorf("not connected")
	}
	return c.health()
}

// placed names the inbox serving namespace by the WorkflowInboxes' status:
// the inbox listing it, else the default inbox, unless an inbox selects the
// namespace without having decided yet (then a NamespaceNotYetPlaced
// error, so that nothing is written to an inbox the namespace is leaving).
func (s *InboxSet) placed(ctx context.Context, namespace string) (string, error) {
	var list workflowv1alpha1.WorkflowInboxList
	// Read only: the cache's objects are not copied.
	if err := s.reader.List(ctx, &list, client.UnsafeDisableDeepCopy); err != nil {
		if meta.IsNoMatchError(err) {
			return defaultInbox, nil // the CRD is not installed: one inbox
		}
		return defaultInbox, fmt.Errorf("list WorkflowInboxes: %w", err)
	}
	if len(list.Items) == 0 {
		return defaultInbox, nil
	}
	inboxes := byAge(list.Items)
	var listed []string
	for _, in := range inboxes {
		if slices.Contains(in.Status.Namespaces, namespace) {
			listed = append(listed, in.Name)
		}
	}
	switch len(listed) {
	case 1:
		return listed[0], nil
	case 0:
	default:
		// A move between two inboxes, half written: the controller
		// finishes it.
		return listed[0], &InboxUnavailableError{Inbox: listed[0], Namespace: namespace, Reason: reasonNotYetPlaced, Brief: true}
	}
	var ns corev1.Namespace
	if err := s.reader.Get(ctx, client.ObjectKey{Name: namespace}, &ns); err != nil {
		if apierrors.IsNotFound(err) {
			return defaultInbox, nil
		}
		return defaultInbox, fmt.Errorf("get Namespace %s: %w", namespace, err)
	}
	for _, in := range inboxes {
		if !in.DeletionTimestamp.IsZero() || !selects(in, ns.Labels) {
			continue
		}
		if slices.Contains(in.Status.HeldNamespaces, namespace) {
			return defaultInbox, nil // it stays, for now, where it was
		}
		return in.Name, &InboxUnavailableError{Inbox: in.Name, Namespace: namespace, Reason: reasonNotYetPlaced, Brief: true}
	}
	return defaultInbox, nil
}

// byAge returns the inboxes oldest first (by name among equals).
func byAge(items []workflowv1alpha1.WorkflowInbox) []*workflowv1alpha1.WorkflowInbox {
	out := make([]*workflowv1alpha1.WorkflowInbox, len(items))
	for i := range items {
		out[i] = &items[i]
	}
	slices.SortFunc(out, func(a, b *workflowv1alpha1.WorkflowInbox) int {
		if c := a.CreationTimestamp.Compare(b.CreationTimestamp.Time); c != 0 {
			return c
		}
		if a.Name < b.Name {
			return -1
		}
		if a.Name > b.Name {
			return 1
		}
		return 0
	})
	return out
}

// selects reports whether the inbox's selector takes a namespace with
// these labels. An invalid or empty selector takes none.
func selects(in *workflowv1alpha1.WorkflowInbox, nsLabels map[string]string) bool {
	sel, err := metav1.LabelSelectorAsSelector(&in.Spec.NamespaceSelector)
	if err != nil || sel.Empty() {
		return false
	}
	return sel.Matches(labels.Set(nsLabels))
}

// databaseTakenError: the database a URL reaches is another inbox's.
type databaseTakenError struct{ by string }

func (e databaseTakenError) Error() string {
	return fmt.Sprintf("its URL reaches the database of inbox %s (through another address or login): two inboxes must not share a database", e.by)
}

// databaseChangedError: the URL of an inbox that serves namespaces now
// reaches another database.
type databaseChangedError struct{}

func (databaseChangedError) Error() string {
	return "the Secret's URL now reaches another database, while this inbox serves namespaces whose runs are in the database it had: it keeps that one; move its namespaces away first (see the drain procedure), or point the Secret back"
}

// connect opens (or keeps) the named inbox at url: a URL the inbox was
// already opened with is kept; a new one replaces the old connection (the
// new one first, then the old one is closed in the background), unless it
// reaches another database than the one it had (or known, the identity its
// status names) while the inbox is serving namespaces. A database another
// inbox has is refused. migrate prepares the database before it is served.
func (s *InboxSet) connect(ctx context.Context, name, url string, serving bool, known string,
	migrate func(context.Context, *pgxpool.Pool) (int, error)) (*inboxConn, error) {
	s.mu.Lock()
	s.tried[name] = true
	old := s.conns[name]
	base := s.base
	s.mu.Unlock()
	sum := sha256.Sum256([]byte(url))
	if old != nil && old.source == sum {
		return old, nil
	}
	cfg, err := pgxpool.ParseConfig(url)
	if err != nil {
		// The parser's message may quote the URL and its password.
		return nil, fmt.Errorf("the Secret's URL does not parse as a Postgres URL")
	}
	boundConnect(cfg)
	pool, err := pgxpool.NewWithConfig(base, cfg)
	if err != nil {
		return nil, fmt.Errorf("open the database: %w", err)
	}
	pctx, cancel := context.WithTimeout(ctx, 10*time.Second)
	err = pool.Ping(pctx)
	var identity string
	if err == nil {
		identity, err = engine.DatabaseIdentity(pctx, pool)
	}
	cancel()
	if err != nil {
		pool.Close()
		return nil, fmt.Errorf("connect: %w", err)
	}
	if by := s.identityTaken(ctx, name, identity); by != "" {
		pool.Close()
		return nil, databaseTakenError{by: by}
	}
	had := known // the database its status names (it may have served it before a restart)
	if old != nil && old.identity != "" {
		had = old.identity
	}
	if serving && had != "" && had != identity {
		pool.Close()
		return nil, databaseChangedError{}
	}
	// An upgrade may wait for another's lock: give it longer than a ping.
	mctx, cancel := context.WithTimeout(ctx, 2*time.Minute)
	schema, err := migrate(mctx, pool)
	cancel()
	if err != nil {
		pool.Close()
		return nil, err
	}
	eng, err := engine.New(pool)
	if err != nil {
		pool.Close()
		return nil, err
	}
	c := &inboxConn{name: name, pool: pool, eng: eng, source: sum, schema: schema, identity: identity, up: true,
		done: make(chan struct{})}
	lctx, stop := context.WithCancel(base)
	c.stop = stop
	go func() {
		defer close(c.done)
		var wg sync.WaitGroup
		wg.Go(func() { s.pingLoop(lctx, c, eng.Ping) })
		if s.serve != nil {
			wg.Go(func() { s.serve(lctx, name, eng) })
		}
		wg.Wait()
	}()
	s.mu.Lock()
	s.conns[name] = c
	s.mu.Unlock()
	if old != nil {
		go old.close() // passes still using it finish first
	}
	s.setUpMetric(name, true)
	s.log.Info("Inbox connected", "inbox", name, "schemaVersion", schema)
	return c, nil
}

// identity returns the identity of the named inbox's database, "" when it
// is not connected or not yet read.
func (s *InboxSet) identity(name string) string {
	s.mu.RLock()
	c := s.conns[name]
	s.mu.RUnlock()
	if c == nil {
		return ""
	}
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.identity
}

// SetDefaultIdentity records the identity of the default inbox's database,
// read at start-up (when it answers, as the manager's start needs): a
// WorkflowInbox reaching that database is then refused even while the
// default inbox does not answer.
func (s *InboxSet) SetDefaultIdentity(identity string) {
	s.mu.RLock()
	c := s.conns[defaultInbox]
	s.mu.RUnlock()
	c.mu.Lock()
	c.identity = identity
	c.mu.Unlock()
}

// identityTaken returns the name of another inbox whose database has
// identity ("" when none): the default inbox's is read once, when first
// needed (a default inbox that does not answer is not compared).
func (s *InboxSet) identityTaken(ctx context.Context, name, identity string) string {
	s.mu.RLock()
	others := make([]*inboxConn, 0, len(s.conns))
	for n, c := range s.conns {
		if n != name {
			others = append(others, c)
		}
	}
	s.mu.RUnlock()
	for _, c := range others {
		c.mu.Lock()
		id := c.identity
		c.mu.Unlock()
		if id == "" && c.eng != nil {
			ictx, cancel := context.WithTimeout(ctx, 5*time.Second)
			read, err := c.eng.DatabaseIdentity(ictx)
			cancel()
			if err != nil {
				s.log.Info("Could not read an inbox's database identity to compare", "inbox", c.name, "error", err.Error())
				continue
			}
			c.mu.Lock()
			c.identity, id = read, read
			c.mu.Unlock()
		}
		if id == identity {
			return c.name
		}
	}
	return ""
}

// boundConnect makes a connection attempt give up within 5 seconds.
func boundConnect(cfg *pgxpool.Config) {
	if cfg.ConnConfig.ConnectTimeout == 0 || cfg.ConnConfig.ConnectTimeout > 5*time.Second {
		cfg.ConnConfig.ConnectTimeout = 5 * time.Second
	}
}

// close stops the connection's loops and closes its pool.
func (c *inboxConn) close() {
	if c.stop == nil {
		return
	}
	c.stop()
	<-c.done
	c.pool.Close()
}

// disconnect stops the named inbox's loops, closes its pool and forgets
// its metrics.
func (s *InboxSet) disconnect(name string) {
	s.mu.Lock()
	c := s.conns[name]
	if name != defaultInbox {
		delete(s.conns, name)
	}
	s.mu.Unlock()
	if c != nil && c.stop != nil {
		c.close()
		s.log.Info("Inbox disconnected", "inbox", name)
	}
	// Its series go too, those of an inbox that never connected included
	// (its simpleworkflow_inbox_up 0).
	if m := s.metrics; m != nil && name != defaultInbox {
		l := prometheus.Labels{"inbox": name}
		m.InboxUp.DeletePartialMatch(l)
		m.Runs.DeletePartialMatch(l)
		m.OldestRunnableAge.DeletePartialMatch(l)
		m.RunDuration.DeletePartialMatch(l)
		m.Transitions.DeletePartialMatch(l)
		m.LeaseExpiries.DeletePartialMatch(l)
	}
}

// recovered is how many times the named inbox's database answered again
// after not answering.
func (s *InboxSet) recovered(name string) int {
	s.mu.RLock()
	defer s.mu.RUnlock()
	return s.recoveries[name]
}

// connected lists the names of the named inboxes connected now.
func (s *InboxSet) connected() []string {
	s.mu.RLock()
	defer s.mu.RUnlock()
	var out []string
	for n := range s.conns {
		if n != defaultInbox {
			out = append(out, n)
		}
	}
	return out
}

// Close disconnects every named inbox.
func (s *InboxSet) Close() {
	for _, n := range s.connected() {
		s.disconnect(n)
	}
}

// pingLoop pings c's database until ctx ends and records whether it answers.
func (s *InboxSet) pingLoop(ctx context.Context, c *inboxConn, ping func(context.Context) error) {
	t := time.NewTicker(inboxPingInterval)
	defer t.Stop()
	for {
		pctx, cancel := context.WithTimeout(ctx, inboxPingTimeout)
		err := ping(pctx)
		cancel()
		if ctx.Err() != nil {
			return
		}
		s.setUpMetric(c.name, err == nil)
		if c.setHealth(err) {
			if err == nil {
				s.mu.Lock()
				s.recoveries[c.name]++
				s.mu.Unlock()
			}
			if err != nil {
				s.log.Error(err, "Inbox database does not answer", "inbox", c.name)
			} else {
				s.log.Info("Inbox database answers again", "inbox", c.name)
			}
			select {
			case s.upChanged <- c.name:
			default:
			}
		}
		select {
		case <-ctx.Done():
			return
		case <-t.C:
		}
	}
}

func (s *InboxSet) setUpMetric(name string, up bool) {
	if s.metrics == nil {
		return
	}
	v := 0.0
	if up {
		v = 1
	}
	s.metrics.InboxUp.WithLabelValues(name).Set(v)
}

// health reports whether the database answered the last ping.
func (c *inboxConn) health() (bool, error) {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.up, c.cause
}

// setHealth records a ping's outcome and reports whether health changed.
func (c *inboxConn) setHealth(err error) bool {
	c.mu.Lock()
	defer c.mu.Unlock()
	up := err == nil
	changed := up != c.up
	c.up, c.cause = up, err
	return changed
}
