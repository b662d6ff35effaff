package bq

import (
	"context"
	"crypto/rand"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/bq-lock/bq/bakery"
	"github.com/bq-lock/bq/certs"
	"github.com/bq-lock/bq/crypto"
	"github.com/bq-lock/bq/transport"
	"github.com/bq-lock/bq/wire"
)

// Config configures a Client.
type Config struct {
	// ClusterFile is the cluster's cluster.yaml (or set Cluster). The
	// signed epochs beside it (epochs/, written by bqserver server add,
	// remove and replace) are read too.
	ClusterFile string
	Cluster     *certs.Cluster
	// Epochs are the cluster's endorsed epochs after its cluster file, for a
	// Cluster given in memory (certs.ReadEpochs). Without them a client
	// learns the newer epochs from the servers (docs/protocol.md change 43).
	Epochs []wire.Epoch
	// IdentityFile is the client's key file (or set Identity). With
	// CreateIdentity, a missing file is created.
	IdentityFile   string
	Identity       *crypto.PrivateKey
	CreateIdentity bool
	// Admission is the identity's admission certificate, for a closed
	// cluster (docs/protocol.md change 23). With IdentityFile it is read
	// from that file, after the key.
	Admission *crypto.Signed
	// SessionFile keeps the identity's session counter (docs/protocol.md §2:
	// session numbers are never reused). Default: IdentityFile + ".session".
	// The client holds a lock on it while open, so a second process of this
	// machine with the same identity fails with ErrIdentityInUse, and so does
	// a second Client of this process (its message says which). With an
	// Identity given in memory and no SessionFile, sessions are numbered in
	// memory: use that only for a key no other process ever uses.
	SessionFile string
	// TTL is the session lease (default 10s). A holder that stops
	// heartbeating is removed within about 2×TTL.
	TTL time.Duration
	// Logger receives the client's logs (nil: discarded).
	Logger *slog.Logger
	// LossGrace is how long before the lease guarantee would lapse a
	// holding is reported lost (Holding.Lost is closed): the time the work
	// done under the lock needs to stop before any correct server may let
	// the next client in (docs/protocol.md change 34). A holding is
	// granted only while the guarantee holds that long ahead. Zero (the
	// default): Lost at the lapse itself, when the servers still wait the
	// clock-drift margin ε·TTL. At most TTL/3; bqclient uses TTL/10 (100 ms to 2 s).
	// With a grace, a lost holding's release reaches the servers only the
	// grace and ε·TTL after Lost, also when the session heals at once
	// (change 36): the work has that long to stop, whichever way it went.
	LossGrace time.Duration
	// ExitLostOnUnlock: the release of a holding lost with a LossGrace
	// waits for Holding.Unlock, which says the work has stopped, instead of
	// going out the grace and ε·TTL after Lost (change 39): for a caller
	// that can tell when its work has stopped (bqclient: once CMD is
	// reaped), so that no timer of its own, delayed by a loaded machine,
	// lets the next client in early. If Unlock never comes, the servers
	// end the session when its lease runs out, as for a crash. Without it,
	// Unlock of a lost holding still sends the release at once.
	ExitLostOnUnlock bool
	// Observe dials an observer (docs/protocol.md change 32): it opens no
	// session and only reads — Status, an Election's Leader and Observe — on
	// connections the servers bind apart from the identity's own, so it
	// works beside a process of the same identity that holds locks without
	// disturbing it, and it takes no session counter. Lock, TryLock,
	// Campaign and Release fail with ErrRefused. With no identity at all it
	// uses a throwaway key, which only an open cluster admits. Dial returns
	// once a quorum of servers welcomed it.
	Observe bool

	// newTransport replaces QUIC (tests).
	newTransport func(key *crypto.PrivateKey, c *certs.Cluster) (transport.Transport, error)
}

// Client is a connection to a bq cluster with one identity and one session
// at a time.
type Client struct {
	cluster *certs.Cluster
	// roster is who the client dials: the members of the newest epoch it
	// knows (docs/protocol.md change 43); the loop follows the bakery's.
	roster *certs.Roster
	// started is the newest epoch the client was given (its cluster file
	// and the epochs beside it, or Config.Epochs); clusterFile the file,
	// if it was given one.
	started     uint64
	clusterFile string
	// observe: an observer client (Config.Observe): no session, no bakery
	// steps; ready once a quorum welcomed it.
	observe bool
	observerState
	ttl time.Duration // the session's lease
	key *crypto.PrivateKey
	log *slog.Logger
	tr  transport.Transport

	mu    sync.Mutex // guards bk, slots, ops, up, connRefused
	bk    *bakery.Client
	slots map[string]*slot
	ops   map[uint64]chan bakery.Event
	up    map[wire.ServerID]bool
	// versions: what each server announced when it was last connected
	// (zero: not known), for the holdings a version brought (change 60).
	versions map[wire.ServerID]wire.Version
	// connRefused: servers that refused our connection for a reason
	// retrying cannot mend (another protocol version, another cluster, an
	// identity not admitted), in their words, until they welcome it again.
	connRefused map[wire.ServerID]error
	saidStale   bool // the warning that started is out of date was logged
	// status routes StatusReply by request id.
	status     map[uint64]*statusWait
	nextStatus uint64
	// proclaims routes the answers to Proclaim by request id; proclaimed
	// is each lock's latest proclamation of a lead this client holds, sent
	// again to a server on every new connection (docs/protocol.md §11).
	// INVARIANT: proclaimed[l] is for the present holding of l.
	proclaims    map[uint64]*proclaimWait
	nextProclaim uint64
	proclaimed   map[string]*proclaimedValue

	leaseReady chan struct{}
	readyOnce  sync.Once
	// refused is closed when the servers refused the session (refusedErr):
	// Dial fails at once instead of waiting out its context.
	refused     chan struct{}
	refusedOnce sync.Once
	refusedErr  error
	// closing is set (under mu) when Close or Detach begins: no attempt
	// starts after it.
	closing   atomic.Bool
	closed    chan struct{}
	closeOnce sync.Once
	done      chan struct{}
	// counter is the identity's session counter, released at the end.
	counter io.Closer
	// grant is what the identity's admission certificate says (nil on an
	// open cluster): its lock-name patterns refuse a name at once
	// (mayUse). renewed reads a certificate renewed in its file since.
	grant   *wire.AdmissionBody
	renewed func() *crypto.Signed
}

// slot is the client's state for one lock name.
// INVARIANT: sem holds a token while a goroutine of this process owns the
// name (from Lock until Unlock, loss or failure); turn.end gives it back,
// once per turn.
type slot struct {
	sem     chan struct{}
	events  chan slotEvent // the current attempt's; set with turn under Client.mu
	turn    *turn
	holding *Holding // set under Client.mu when Acquired is dispatched
	mutex   *Mutex
}

// slotEvent is a bakery event for one lock name, with the holding it created.
type slotEvent struct {
	bakery.Event
	holding *Holding
}

// Dial connects to the cluster, opens a session and waits until the lease
// guarantee holds (q servers acknowledged the session) or ctx ends.
func Dial(ctx context.Context, cfg Config) (*Client, error) {
	began := time.Now()
	if cfg.Logger == nil {
		cfg.Logger = slog.New(slog.DiscardHandler)
	}
	if cfg.TTL == 0 {
		cfg.TTL = 10 * time.Second
	}
	if cfg.TTL < 100*time.Millisecond {
		return nil, fmt.Errorf("bq: TTL %v is below the minimum 100ms", cfg.TTL)
	}
	cluster := cfg.Cluster
	epochs := cfg.Epochs
	if cluster == nil {
		if cfg.ClusterFile == "" {
			return nil, errors.New("bq: no cluster: set Config.ClusterFile (or BQ_CLUSTER for bqclient)")
		}
		var err error
		if cluster, err = certs.LoadCluster(cfg.ClusterFile); err != nil {
			return nil, err
		}
		// The epochs beside the cluster file, if any: without them the
		// client learns them from the cluster (change 43).
		if epochs, err = certs.ReadEpochs(filepath.Dir(cfg.ClusterFile)); err != nil {
			return nil, err
		}
	}
	roster := certs.NewRoster(cluster)
	key, admission := cfg.Identity, cfg.Admission
	if key == nil && cfg.Observe && cfg.IdentityFile == "" {
		var err error
		if key, err = crypto.GenerateKey(cluster.Scheme, rand.Reader); err != nil {
			return nil, err
		}
	}
	if key == nil {
		if cfg.IdentityFile == "" {
			return nil, errors.New("bq: no identity: set Config.IdentityFile (or BQ_IDENTITY for bqclient)")
		}
		id, err := certs.LoadIdentity(cfg.IdentityFile)
		if errors.Is(err, certs.ErrNoIdentity) && cfg.CreateIdentity {
			id = &certs.Identity{}
			id.Key, err = certs.NewIdentity(cfg.IdentityFile, cluster.Scheme, rand.Reader)
		}
		if err != nil {
			return nil, err
		}
		key = id.Key
		if admission == nil {
			admission = id.Admission
		}
	}
	chain := cluster.Chain()
	if _, err := chain.Extend(epochs); err != nil {
		return nil, fmt.Errorf("bq: the epochs given do not continue the cluster file: %w", err)
	}
	clientCAs, _ := chain.ClientCAs(cluster.ClientCA)
	grant, admissionNote, err := checkAdmission(cluster, clientCAs, key, admission, cfg.IdentityFile, chain.Number(), cfg.ClusterFile)
	if err != nil {
		return nil, err
	}
	if admissionNote != "" {
		cfg.Logger.Warn(admissionNote)
	}
	renewed := renewedAdmission(cfg, key)
	newTransport := cfg.newTransport
	if newTransport == nil {
		newTransport = func(key *crypto.PrivateKey, c *certs.Cluster) (transport.Transport, error) {
			return transport.DialClient(transport.ClientConfig{
				Key: key, Admission: admission, Cluster: c.ID(), Servers: roster.Addresses(nil), CAPool: roster.CAPool(), IdentifyServer: roster.ServerByCert, Logger: cfg.Logger,
				Observe: cfg.Observe, RenewedAdmission: renewed,
			})
		}
	}
	var sessions bakery.SessionSource = &bakery.CountingSessions{}
	var counter io.Closer = noCounter{}
	if !cfg.Observe {
		var err error
		if sessions, counter, err = sessionSource(cfg); err != nil {
			return nil, err
		}
	}
	if cfg.LossGrace < 0 || cfg.LossGrace > cfg.TTL/3 {
		_ = counter.Close()
		return nil, fmt.Errorf("bq: LossGrace %v is outside [0, TTL/3 = %v]: heartbeats go every TTL/3", cfg.LossGrace, cfg.TTL/3)
	}
	bk, err := bakery.NewClient(bakery.ClientConfig{
		Key: key, N: cluster.N, F: cluster.F, Keys: cluster.Keyring(), TTL: cfg.TTL, Sessions: sessions, Grace: cfg.LossGrace,
		ExitLostOnRelease: cfg.ExitLostOnUnlock, ClusterCA: cluster.CAKey(), Epochs: epochs,
	})
	if err != nil {
		_ = counter.Close()
		return nil, fmt.Errorf("bq: %w", err)
	}
	if _, err := roster.Follow(bk.Chain(), bk.Epoch()); err != nil {
		_ = counter.Close()
		return nil, fmt.Errorf("bq: %w", err)
	}
	var start bakery.Effects
	if !cfg.Observe {
		if start, err = bk.Start(time.Now()); err != nil {
			_ = counter.Close()
			return nil, fmt.Errorf("bq: %w", err)
		}
	}
	tr, err := newTransport(key, cluster)
	if err != nil {
		_ = counter.Close()
		return nil, err
	}
	c := &Client{
		cluster: cluster, roster: roster, observe: cfg.Observe, ttl: cfg.TTL,
		observerState: observerState{watches: make(map[string]*watch), admission: admission}, key: key, log: cfg.Logger.With("client", wire.ClientID(key.Public.ID).String()), tr: tr, bk: bk,
		slots: make(map[string]*slot), ops: make(map[uint64]chan bakery.Event), up: make(map[wire.ServerID]bool),
		versions:    make(map[wire.ServerID]wire.Version),
		connRefused: make(map[wire.ServerID]error),
		status:      make(map[uint64]*statusWait),
		proclaims:   make(map[uint64]*proclaimWait), proclaimed: make(map[string]*proclaimedValue),
		leaseReady: make(chan struct{}), refused: make(chan struct{}), closed: make(chan struct{}), done: make(chan struct{}),
		counter: counter, started: chain.Number(), clusterFile: cfg.ClusterFile,
		grant: grant, renewed: renewed,
	}
	c.mu.Lock()
	c.apply(start)
	c.mu.Unlock()
	go c.loop(tickEvery(cfg.TTL))

	select {
	case <-c.leaseReady:
		return c, nil
	case <-c.refused:
		c.abort()
		err := mapBakeryErr(c.refusedErr)
		var e *Error
		if admissionNote != "" && errors.Is(err, ErrNotPermitted) && errors.As(err, &e) {
			err = &Error{msg: e.msg + "; " + admissionNote, kinds: e.kinds, cause: e.cause}
		}
		return nil, err
	case <-ctx.Done():
		reach := c.reachable()
		c.mu.Lock()
		refusal := c.bk.LastRefusal()
		acked, suspected := c.bk.LeaseAcks()
		v := c.view()
		c.mu.Unlock()
		c.abort()
		what := fmt.Sprintf("a quorum of the cluster: %d of %d servers answered, need %d (is the cluster running? check %s)",
			reach, len(v.ids), v.q, clusterWhere(cfg, c.started))
		if reach >= v.q && !cfg.Observe {
			// Connected, yet no quorum acknowledged the session: say so.
			what = fmt.Sprintf("a quorum of the cluster to acknowledge this client's session: %d of %d servers connected, %d acknowledged it and %d suspected it, need %d acknowledgements",
				reach, len(v.ids), acked, suspected, v.q)
		}
		if refusal != "" {
			what += "; refused by " + plainWords(refusal)
		}
		err := gaveUp(ctx, time.Since(began), what, true)
		if !errors.Is(err, ErrUnavailable) { // cancelled: still, no quorum was reached
			err = &Error{msg: err.Error(), kinds: []error{ErrUnavailable}, cause: context.Cause(ctx), what: what}
		}
		return nil, err
	}
}

// sessionSource is where the client's session numbers come from: the
// identity's counter file (locked while the client lives), or memory for a
// key given in memory without a SessionFile. The closer releases the file.
func sessionSource(cfg Config) (bakery.SessionSource, io.Closer, error) {
	path := cfg.SessionFile
	if path == "" && cfg.Identity == nil {
		path = certs.SessionFileOf(cfg.IdentityFile)
	}
	if path == "" {
		return &bakery.CountingSessions{}, noCounter{}, nil
	}
	sc, err := certs.OpenSessionCounter(path, rand.Reader)
	if inUse, ok := errors.AsType[*certs.InUseError](err); ok {
		who := "identity " + cfg.IdentityFile
		if cfg.IdentityFile == "" {
			who = "the identity of session counter " + path
		}
		msg := fmt.Sprintf("bq: %s is in use by another process of this machine (it has locked %s): give each process its own identity", who, path)
		if inUse.ThisProcess {
			msg = fmt.Sprintf("bq: %s is in use in this process: another Client of this process has it open (a Client is safe for concurrent use: share that one, or give each its own identity)", who)
		}
		return nil, nil, &Error{msg: msg, kinds: []error{ErrIdentityInUse}, cause: err}
	}
	if err != nil {
		return nil, nil, fmt.Errorf("bq: %w", err)
	}
	return sc, sc, nil
}

// noCounter is the closer of sessions numbered in memory.
type noCounter struct{}

func (noCounter) Close() error { return nil }

// clusterWhere says where the addresses a client dials came from, and how
// a client given an old epoch finds the cluster again.
func clusterWhere(cfg Config, epoch uint64) string {
	if cfg.ClusterFile != "" {
		return fmt.Sprintf("the addresses of epoch %d, from %s and the epochs beside it; if the cluster changed its members since, copy its epochs/ directory beside %s",
			epoch, cfg.ClusterFile, cfg.ClusterFile)
	}
	return fmt.Sprintf("the cluster's addresses, of epoch %d", epoch)
}

func tickEvery(ttl time.Duration) time.Duration {
	return min(max(ttl/30, 5*time.Millisecond), 100*time.Millisecond)
}

// ID is the client's id (the hash of its public key).
func (c *Client) ID() wire.ClientID { return wire.ClientID(c.key.Public.ID) }

// Epochs reports the epoch the client was started in (its cluster file and
// the epochs beside it, or Config.Epochs) and the newest it has learned
// from the servers since (docs/protocol.md change 43). When now is later,
// what the client was given is out of date: a client started with it finds
// the cluster only while some member of the started epoch still runs, so
// give the program the newer epochs (copy the cluster directory's epochs/
// beside its cluster file).
func (c *Client) Epochs() (started, now uint64) {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.started, c.bk.Epoch()
}

// Cluster is the cluster the client is connected to.
func (c *Client) Cluster() *certs.Cluster { return c.cluster }

// connected are the servers the client is connected to, ascending. The
// caller holds c.mu.
func (c *Client) connected() []wire.ServerID {
	var ids []wire.ServerID
	for id, up := range c.up {
		if up {
			ids = append(ids, id)
		}
	}
	slices.Sort(ids)
	return ids
}

// Reach is how much of its epoch's membership a client is connected to.
type Reach struct {
	Epoch        uint64
	N, F, Quorum int
	Connected    int // servers of the epoch connected now
}

// Reach says how many servers of the client's epoch it is connected to now.
// It asks no server: it is the client's own view, for a health check.
func (c *Client) Reach() Reach {
	c.mu.Lock()
	defer c.mu.Unlock()
	v := c.view()
	r := Reach{Epoch: v.epoch, N: len(v.ids), F: v.f, Quorum: v.q}
	for _, id := range v.ids {
		if c.up[id] {
			r.Connected++
		}
	}
	return r
}

func (c *Client) reachable() int {
	c.mu.Lock()
	defer c.mu.Unlock()
	n := 0
	for _, up := range c.up {
		if up {
			n++
		}
	}
	return n
}

func (c *Client) loop(every time.Duration) {
	defer close(c.done)
	ticker := time.NewTicker(every)
	defer ticker.Stop()
	// loss fires when the guarantee of a holding lapses (bakery LossAt),
	// so that Lost comes then and not up to a tick later.
	loss := time.NewTimer(time.Hour)
	loss.Stop()
	defer loss.Stop()
	var lossAt time.Time
	armLoss := func() {
		at := c.bk.LossAt()
		if at.Equal(lossAt) {
			return
		}
		lossAt = at
		if at.IsZero() {
			loss.Stop()
			return
		}
		loss.Reset(time.Until(at))
	}
	in := c.tr.Inbound()
	for {
		select {
		case <-c.closed:
			return
		case <-loss.C:
			lossAt = time.Time{}
			if c.observe {
				break
			}
			c.mu.Lock()
			c.apply(c.bk.Tick(time.Now()))
			armLoss()
			c.mu.Unlock()
		case <-ticker.C:
			if c.observe {
				break
			}
			c.mu.Lock()
			// The time now, not the tick's: a tick read late (a busy
			// loop, a loaded machine) would report a loss late and date
			// the late Exit early (docs/protocol.md change 36).
			c.apply(c.bk.Tick(time.Now()))
			armLoss()
			c.mu.Unlock()
		case ev, ok := <-in:
			if !ok {
				return
			}
			if ev.From.IsClient {
				continue
			}
			now := time.Now()
			c.mu.Lock()
			switch ev.Kind {
			case transport.EventMessage:
				if r := ev.Msg.StatusReply; r != nil {
					c.statusReply(ev.From.Server, r)
					break
				}
				if c.observe && ev.Msg.EpochNews == nil {
					c.observerMessage(ev.From.Server, ev.Msg)
					break
				}
				if c.proclaimAnswer(ev.From.Server, ev.Msg) {
					break
				}
				eff := c.bk.Step(now, ev.From.Server, ev.Msg)
				c.followEpochs() // before its sends: they may go to the new members
				c.apply(eff)
				armLoss()
			case transport.EventConnected:
				c.up[ev.From.Server] = true
				delete(c.connRefused, ev.From.Server) // it welcomed us: no refusal stands
				c.versions[ev.From.Server] = ev.Version
				if c.observe {
					c.observerConnected(ev.From.Server)
					break
				}
				c.apply(c.bk.Reconnected(now, ev.From.Server))
				c.reproclaim(ev.From.Server)
			case transport.EventDisconnected:
				c.up[ev.From.Server] = false
			case transport.EventBadInput:
				c.log.Warn("bad input from server", "server", ev.From.String(), "err", ev.Err)
			case transport.EventRefused:
				c.log.Warn("a server refused the connection", "server", ev.From.String(), "err", ev.Err)
				why := ev.Err
				var re *transport.RefusedError
				if errors.As(ev.Err, &re) {
					why = errors.New(bakery.ClientNamed(c.ID(), re.Detail)) // its words, not the protocol's
					if re.Code == wire.ErrCodeNotAllowed {
						why = &notAdmitted{why: why.Error()}
					}
				}
				c.connRefused[ev.From.Server] = why
				if v := c.view(); len(v.ids)-len(c.connRefused) < v.q {
					kind := bakery.ErrRefused
					if re != nil && re.Code == wire.ErrCodeNotAllowed {
						kind = bakery.ErrNotPermitted // not admitted, or revoked (change 23)
					}
					r := &bakery.Refusal{Kind: kind, What: "the connection", N: len(v.ids), Q: v.q, By: make(map[wire.ServerID]string, len(c.connRefused))}
					for s, err := range c.connRefused {
						r.By[s] = err.Error()
					}
					c.refusedOnce.Do(func() { c.refusedErr = r; close(c.refused) })
				}
			}
			c.mu.Unlock()
		}
	}
}

// view is who counts now: the servers of the client's epoch, its f and q
// (the cluster file's until the client moves, change 43). c.mu must be held.
type view struct {
	epoch uint64
	ids   []wire.ServerID
	f, q  int
}

func (c *Client) view() view {
	ids, f, q := c.bk.Members()
	return view{epoch: c.bk.Epoch(), ids: ids, f: f, q: q}
}

// followEpochs dials the members of an epoch the bakery just moved to and
// stops dialing the servers it left (docs/protocol.md change 43). c.mu must be held.
func (c *Client) followEpochs() {
	changed, err := c.roster.Follow(c.bk.Chain(), c.bk.Epoch())
	if err != nil {
		c.log.Error("cannot follow the cluster's new epoch", "err", err)
		return
	}
	if !changed {
		return
	}
	addrs := c.roster.Addresses(nil)
	for id := range c.up {
		if _, ok := addrs[id]; !ok {
			delete(c.up, id)
			delete(c.connRefused, id)
		}
	}
	if r, ok := c.tr.(transport.Retrustable); ok {
		r.SetCAPool(c.roster.CAPool())
	}
	if r, ok := c.tr.(transport.Reconfigurable); ok {
		r.SetServers(addrs)
	}
	c.log.Info("the cluster is in a new epoch: dialing its members", "epoch", c.bk.Epoch(), "servers", len(addrs))
	if c.bk.Epoch() > c.started && !c.saidStale {
		c.saidStale = true
		c.log.Warn("the epochs this client was started with are out of date: give it the cluster directory's epochs/ beside its cluster file, or it will not find the cluster once no member of its epoch remains",
			"started", c.started, "cluster_epoch", c.bk.Epoch(), "cluster_file", c.clusterFile)
	}
}

// apply carries out a bakery step's effects. c.mu must be held.
func (c *Client) apply(e bakery.Effects) {
	for _, s := range e.Send {
		if err := c.tr.Send(wire.ServerPeer(s.To), s.Msg); err != nil && !errors.Is(err, transport.ErrNotConnected) {
			c.log.Debug("send failed", "server", s.To.String(), "err", err)
		}
	}
	if c.bk.LeaseHolds(time.Now()) {
		c.readyOnce.Do(func() { close(c.leaseReady) })
	} else if err := c.bk.SessionRefused(); err != nil {
		c.refusedOnce.Do(func() { c.refusedErr = err; close(c.refused) })
	}
	for _, ev := range e.Events {
		switch ev.Kind {
		case bakery.ReadDone, bakery.SetDone:
			if ch := c.ops[ev.Op]; ch != nil {
				delete(c.ops, ev.Op)
				ch <- ev
			}
		case bakery.Released:
			if ch := c.ops[ev.Op]; ev.Op != 0 && ch != nil {
				delete(c.ops, ev.Op)
				ch <- ev
				break
			}
			c.toSlot(ev)
		case bakery.Ticketed:
		case bakery.Lost:
			c.lost(ev)
		default:
			c.toSlot(ev)
		}
	}
}

// lost ends a holding whose lease guarantee failed. c.mu must be held.
func (c *Client) lost(ev bakery.Event) {
	s := c.slots[ev.Lock]
	if s == nil || s.holding == nil {
		return
	}
	err := mapBakeryErr(ev.Err)
	if err == nil {
		err = ErrLockLost
	}
	if why := c.notAdmitted(); why != "" && errors.Is(ev.Err, bakery.ErrLeaseLost) {
		// Its lease failed because the cluster threw the identity out
		// (revoked, expired): say that, not the lease's mechanics.
		err = &Error{msg: "bq: lock lost: " + why, kinds: []error{ErrLockLost, ErrNotPermitted}, cause: ev.Err}
	}
	c.log.Warn("lock lost", "lock", ev.Lock, "token", ev.Token.String(), "why", err)
	s.holding.lose(err)
	s.holding.turn.end() // the holding is over; the name is free again
	s.holding = nil
}

// notAdmitted says why the cluster no longer admits this identity when f+1
// servers of its epoch refused its connection as not admitted (revoked, its
// certificate expired: docs/protocol.md change 23), so at least one correct
// server did: their words, each once; "" otherwise. c.mu must be held.
func (c *Client) notAdmitted() string {
	v := c.view()
	by := make(map[wire.ServerID]string)
	for _, s := range v.ids {
		if re, ok := errors.AsType[*notAdmitted](c.connRefused[s]); ok {
			by[s] = re.why
		}
	}
	if len(by) <= v.f {
		return ""
	}
	var out []string
	for _, r := range (&bakery.Refusal{By: by}).Reasons() {
		out = append(out, plainWords(r.Text))
	}
	return strings.Join(out, "; ")
}

// notAdmitted is a server's refusal of this client's connection as not
// admitted to a closed cluster, in its words.
type notAdmitted struct{ why string }

func (e *notAdmitted) Error() string { return e.why }

// toSlot hands an attempt's event to the goroutine waiting on its lock name.
// c.mu must be held.
func (c *Client) toSlot(ev bakery.Event) {
	s := c.slots[ev.Lock]
	if s == nil || s.events == nil {
		return
	}
	se := slotEvent{Event: ev}
	switch ev.Kind {
	case bakery.Acquired:
		se.holding = &Holding{m: s.mutex, token: ev.Token, session: c.bk.Session(), attempt: ev.Attempt, turn: s.turn, lost: make(chan struct{})}
		s.holding = se.holding
	case bakery.Released, bakery.Failed:
		s.holding = nil
	}
	select {
	case s.events <- se:
	default:
		c.log.Error("dropped an event: nobody waits for it", "event", ev.String())
	}
}

func (c *Client) slot(m *Mutex) *slot {
	c.mu.Lock()
	defer c.mu.Unlock()
	s := c.slots[m.name]
	if s == nil {
		s = &slot{sem: make(chan struct{}, 1), mutex: m}
		c.slots[m.name] = s
	}
	return s
}

// renewedAdmission reads, before each connection, the admission
// certificate in the identity file the client was started with, so that a
// client renewed while it runs (bqserver client renew, after a client-CA
// rotation) shows the renewed certificate when it reconnects — as after
// 'ca retire-clients' closes the connections the retired CA admitted
// (docs/protocol.md change 52). A certificate given in Config.Admission,
// or none in the file, or one of another key, leaves the one the client
// started with.
func renewedAdmission(cfg Config, key *crypto.PrivateKey) func() *crypto.Signed {
	if cfg.IdentityFile == "" || cfg.Admission != nil {
		return nil
	}
	return func() *crypto.Signed {
		id, err := certs.LoadIdentity(cfg.IdentityFile)
		if err != nil || id.Admission == nil || id.Key.Public.ID != key.Public.ID {
			return nil
		}
		return id.Admission
	}
}
