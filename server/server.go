// Package server is bqserver's runtime: it loads a server's material, opens
// its bbolt store, runs its QUIC transport, and drives a pure protocol Core
// with the inputs it receives and the time that passes.
//
// The loop is the raft Ready pattern: take every input waiting at that
// moment, step the core with each, make all their records durable in one
// group commit, and only then send their messages.
package server

import (
	"context"
	"encoding/binary"
	"errors"
	"fmt"
	"log/slog"
	"maps"
	"net"
	"net/http"
	"path/filepath"
	"sync"
	"sync/atomic"
	"time"

	"github.com/bq-lock/bq/certs"
	"github.com/bq-lock/bq/crypto"
	"github.com/bq-lock/bq/server/core"
	"github.com/bq-lock/bq/server/metrics"
	"github.com/bq-lock/bq/server/store"
	"github.com/bq-lock/bq/transport"
	"github.com/bq-lock/bq/wire"
)

// Config configures one server.
type Config struct {
	// Dir is the cluster directory made by `bqserver init`.
	Dir string
	// ID is this server's id in Dir/cluster.yaml.
	ID int
	// Logger receives structured logs; nil discards them.
	Logger *slog.Logger
	// NewCore builds the protocol core for the loaded material; nil means the
	// real one (NewProtocolCore) with default settings.
	NewCore func(m *certs.ServerMaterial) (Core, error)
	// TickEvery is how often time is fed to the core (default 10ms).
	TickEvery time.Duration
	// MaxBatch caps the inputs stepped before one group commit (default 256).
	MaxBatch int
	// Limits are the transport's limits (zero: defaults).
	Limits transport.Limits
	// MetricsAddr, if set, serves Prometheus metrics at http://MetricsAddr/metrics.
	MetricsAddr string
	// Settings are the operator's (LoadSettings); nil is every default.
	// They tune the real core (when NewCore is nil) and Limits.
	Settings *Settings
}

const (
	metaBucket     = "meta"
	incarnationKey = "incarnation"
)

// Server is one running bqserver.
type Server struct {
	cfg         Config
	log         *slog.Logger
	Material    *certs.ServerMaterial
	Incarnation uint64

	store     *store.Store
	transport transport.Transport
	admission *admission // nil for an open cluster
	core      Core
	roster    *certs.Roster
	// serves and knows: the core's epochs when followEpochs last looked.
	serves, knows uint64
	// conflictSaid, forgottenSaid: the epoch alarms already said (epochAlarms).
	conflictSaid  bool
	forgottenSaid uint64
	metrics       *metrics.Registry
	// certificates: what the server depends on, as noteCertificates last
	// worked it out (expiry.go); set before the first warning reads it.
	certificates atomic.Pointer[[]metrics.Certificate]
	// preverifier checks signatures in the transport's read loops, with the
	// keyring of the epoch served (followEpochs keeps it current).
	preverifier atomic.Pointer[wire.Preverifier]
	// clientRate, clientBurst: client_rate and client_burst, which bound
	// the checks made ahead on a client's connection (preverify.go).
	clientRate  float64
	clientBurst int
	http        *http.Server
	published   time.Time

	cancel context.CancelFunc
	done   chan struct{}
	// pipe carries the loop's effects to commitLoop; committed is closed when it exits.
	pipe      chan core.Effects
	committed chan struct{}
	// order decides which messages go before their batch's commit and
	// holds back lazy records (core.Pipeline); the loop and commitLoop share
	// it under orderMu.
	orderMu sync.Mutex
	order   core.Pipeline
	// repair schedules a resync with each server whose send queue
	// overflowed (core.Repair); send (both goroutines) and the loop share
	// it under repairMu.
	repairMu sync.Mutex
	repair   core.Repair
	limitLog *limitLog
	// connLimits counts the connections the transport refused by a limit
	// (added to bq_limit_refusals_total with the core's refusals).
	connLimits connLimits
	closeOnce  sync.Once
	closeErr   error
	// failed is closed and failure set, once, when the store failed for
	// good and the server stopped itself (failstop.go).
	failOnce sync.Once
	failed   chan struct{}
	failure  error
}

// Start loads the server's material, opens its store, records a new
// incarnation durably, restores the core, and starts serving.
func Start(cfg Config) (*Server, error) {
	if cfg.Logger == nil {
		cfg.Logger = slog.New(slog.DiscardHandler)
	}
	if cfg.TickEvery <= 0 {
		cfg.TickEvery = 10 * time.Millisecond
	}
	if cfg.MaxBatch <= 0 {
		cfg.MaxBatch = 256
	}
	m, err := certs.LoadServer(cfg.Dir, cfg.ID)
	if err != nil {
		return nil, err
	}
	log := cfg.Logger.With("server", m.ID.String())
	if err := checkCorruptMark(m.Dir); err != nil {
		return nil, err
	}
	reg := metrics.NewRegistry(m.ID.String())
	storeOpts := store.Options{Logger: log, Observe: func(d time.Duration, ops int) {
		reg.Fsync.Observe(d.Seconds())
		reg.Batches.Observe(float64(ops))
	}}
	cfg.Settings.ApplyStore(&storeOpts)
	st, err := store.Open(filepath.Join(m.Dir, "bq.db"), storeOpts)
	if err != nil {
		return nil, startFailed(m.Dir, err)
	}
	if n := st.Stats().Recovered; n > 0 {
		log.Info("replayed the write-ahead log: what this server acknowledged before it stopped is back", "records", n)
	}
	s := &Server{cfg: cfg, log: log, Material: m, store: st, metrics: reg, done: make(chan struct{}),
		pipe: make(chan core.Effects, 64), committed: make(chan struct{}), limitLog: newLimitLog(log),
		failed: make(chan struct{})}
	fail := func(err error) (*Server, error) {
		if s.transport != nil {
			_ = s.transport.Close()
		}
		if s.http != nil {
			_ = s.http.Close()
		}
		_ = st.Close()
		return nil, err
	}
	if cfg.MetricsAddr != "" {
		ln, err := net.Listen("tcp", cfg.MetricsAddr)
		if err != nil {
			return fail(fmt.Errorf("server: metrics address %s: %w", cfg.MetricsAddr, err))
		}
		mux := http.NewServeMux()
		mux.Handle("/metrics", reg.Handler())
		s.http = &http.Server{Handler: mux, ReadHeaderTimeout: 5 * time.Second}
		go func() { _ = s.http.Serve(ln) }()
		log.Info("serving metrics", "url", "http://"+ln.Addr().String()+"/metrics")
	}

	if s.Incarnation, err = s.nextIncarnation(); err != nil {
		return fail(err)
	}
	newCore := cfg.NewCore
	if newCore == nil {
		newCore = func(m *certs.ServerMaterial) (Core, error) { return NewProtocolCore(m, cfg.Settings.ApplyCore) }
	}
	if s.core, err = newCore(m); err != nil {
		return fail(fmt.Errorf("server: building core: %w", err))
	}
	if err := s.core.Restore(st); err != nil {
		return fail(startFailed(m.Dir, fmt.Errorf("server: restoring state from %s: %w", filepath.Join(m.Dir, "bq.db"), err)))
	}

	c := m.Cluster
	s.roster = certs.NewRoster(c)
	s.preverifier.Store(&wire.Preverifier{Self: m.ID}) // statements only until an epoch's keyring is known
	s.clientRate, s.clientBurst = clientRateOf(cfg.Settings)
	if err := s.followEpochs(); err != nil {
		return fail(err)
	}
	s.noteCertificates()
	limits := cfg.Limits
	cfg.Settings.ApplyLimits(&limits)
	var admit func(wire.ClientID, *crypto.Signed) (*wire.AdmissionBody, error)
	if c.Closed() {
		var revoked []wire.ClientID
		if r, ok := s.core.(revoker); ok {
			revoked = r.Revoked()
		}
		s.admission = newAdmission(c, revoked)
		s.admission.log = s.log
		s.admitCAs()
		admit = s.admission.admit
	}
	s.transport, err = transport.ListenServer(transport.ServerConfig{
		ID:             m.ID,
		Cluster:        c.ID(),
		ListenAddr:     m.Address,
		Peers:          s.roster.Addresses(&m.ID),
		Cert:           m.TLS,
		CAPool:         s.roster.CAPool(),
		IdentifyServer: s.roster.ServerByCert,
		AdmitClient:    admit,
		Limits:         limits,
		Logger:         log,
		OnLimit:        s.connLimits.note,
		Preverify:      s.preverifyFor,
	})
	if err != nil {
		return fail(err)
	}
	epoch, knows, n, f, q := uint64(0), uint64(0), c.N, c.F, c.Quorum
	if k, ok := s.core.(epochCore); ok && k.Chain() != nil {
		epoch, knows = k.Epoch()
		if b := k.Chain().Body(knows); b != nil {
			n, f, q = b.N(), int(b.F), b.Quorum()
		}
	}
	// The numbers are those of the newest epoch known, not the cluster
	// file's (issue 44): a server that joined a grown cluster serves a
	// larger n.
	log.Info("server started", "addr", m.Address, "cluster", c.ID().String(), "epoch", knows, "n", n, "f", f, "quorum", q,
		"closed", c.Closed(), "incarnation", s.Incarnation, "dir", m.Dir)
	if m.LeftIn > 0 {
		log.Warn("this server left the cluster in a change: it runs only to seal its epoch and hand its state to the new members; stop it once they serve ('bqserver server list' shows them serving), and destroy its keys",
			"left_in_epoch", m.LeftIn)
	}
	if knows > epoch {
		log.Info("the cluster has a newer epoch: copying its state before serving it", "serves", epoch, "knows", knows, "peers", len(s.roster.Addresses(&m.ID)))
	}
	if given := cfg.Settings.Given(); len(given) > 0 {
		log.Info("settings", given...)
	}

	ctx, cancel := context.WithCancel(context.Background())
	s.cancel = cancel
	go metrics.WarnExpiry(ctx, log, s.dependsOn)
	go s.loop(ctx)
	go s.commitLoop(ctx)
	go s.watchStore(ctx)
	go s.scrub(ctx, cfg.Settings.ScrubRate(), cfg.Settings.ScrubInterval())
	return s, nil
}

// nextIncarnation durably bumps the server's incarnation number, so every run
// of a server is distinguishable (the crash-recovery model of seeds/004).
func (s *Server) nextIncarnation() (uint64, error) {
	var inc uint64
	v, err := s.store.Get(metaBucket, []byte(incarnationKey))
	if err != nil {
		return 0, err
	}
	if len(v) == 8 {
		inc = binary.BigEndian.Uint64(v)
	}
	inc++
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	if err := s.store.Commit(ctx, store.Op{Bucket: metaBucket, Key: []byte(incarnationKey), Value: binary.BigEndian.AppendUint64(nil, inc)}); err != nil {
		return 0, fmt.Errorf("server: recording incarnation: %w", err)
	}
	return inc, nil
}

func (s *Server) loop(ctx context.Context) {
	defer close(s.done)
	ticker := time.NewTicker(s.cfg.TickEvery)
	defer ticker.Stop()
	inbound := s.transport.Inbound()
	batch := make([]transport.Inbound, 0, s.cfg.MaxBatch)
	for {
		var eff core.Effects
		tick := false
		batch = batch[:0]
		select {
		case <-ctx.Done():
			return
		case now := <-ticker.C:
			tick = true
			eff = s.core.Tick(now)
			crypto.AgeCaches(now) // what a flood of identities left is let go (crypto/verdicts.go)
			s.repairMu.Lock()
			due := s.repair.Due(now)
			s.repairMu.Unlock()
			for _, peer := range due {
				// What overflowed never left: resynchronise with the peer as
				// on a reconnect (docs/protocol.md §3.5, core.Repair).
				s.log.Info("resynchronising with a server whose send queue overflowed", "peer", peer.String())
				s.metrics.Repairs.Inc()
				eff.Append(s.core.Step(now, core.Input{Kind: core.InputConnected, From: wire.ServerPeer(peer)}))
			}
			if now.Sub(s.published) >= time.Second {
				s.publish(now)
			}
		case in, ok := <-inbound:
			if !ok {
				return
			}
			batch = append(batch, in)
		drain:
			for len(batch) < s.cfg.MaxBatch {
				select {
				case in, ok := <-inbound:
					if !ok {
						break drain
					}
					batch = append(batch, in)
				default:
					break drain
				}
			}
			now := time.Now()
			for _, in := range batch {
				s.observe(in)
				s.count(in)
				if ci, ok := coreInput(in); ok {
					eff.Append(s.core.Step(now, ci))
				}
			}
		}
		s.revoke(eff.Revoked)
		s.expire(eff.Expired)
		if err := s.followEpochs(); err != nil {
			s.log.Error("cannot follow the cluster's new epoch", "err", err)
		}
		s.orderMu.Lock()
		recs, now, late := s.order.Batch(eff, tick)
		s.orderMu.Unlock()
		// A message sent now has no earlier message to its peer waiting, and
		// only this goroutine makes new ones: the peer's order holds. A
		// listener hears of an Exit while the Exit is being committed.
		for _, o := range now {
			s.send(o)
		}
		eff = core.Effects{Persist: recs, Send: late}
		if len(eff.Persist) == 0 && len(eff.Send) == 0 {
			continue
		}
		select {
		case s.pipe <- eff:
		case <-ctx.Done():
			return
		}
	}
}

// commitLoop makes the loop's effects durable and sends them, in order. It
// takes every batch queued while the previous commit was in flight into one
// commit (so the loop never waits on a disk), and sends a batch's messages
// only after its records and those of every earlier batch are durable: no
// message ever reflects state a crash could lose.
// INVARIANT: batches are committed and sent in the order the loop queued them.
func (s *Server) commitLoop(ctx context.Context) {
	defer close(s.committed)
	var recs []core.Record
	var sends []core.Outgoing
	for {
		var first core.Effects
		select {
		case first = <-s.pipe:
		case <-ctx.Done():
			return
		}
		recs, sends = append(recs[:0], first.Persist...), append(sends[:0], first.Send...)
	more:
		for {
			select {
			case e := <-s.pipe:
				recs, sends = append(recs, e.Persist...), append(sends, e.Send...)
			default:
				break more
			}
		}
		if !s.persist(ctx, recs) {
			return
		}
		for _, o := range sends {
			s.send(o)
		}
		s.orderMu.Lock()
		s.order.Sent(sends)
		s.orderMu.Unlock()
		clear(sends)
	}
}

func (s *Server) send(o core.Outgoing) {
	if er := o.Msg.Error; er != nil && er.Limit != nil && o.To.IsClient {
		s.limitLog.note(time.Now(), o.To.Client, er)
	}
	err := s.transport.Send(o.To, o.Msg)
	if err == nil {
		s.countOut(o.To)
	} else if errors.Is(err, transport.ErrQueueFull) && !o.To.IsClient {
		s.metrics.Overflows.Inc()
		s.repairMu.Lock()
		s.repair.Overflowed(o.To.Server, time.Now())
		s.repairMu.Unlock()
	} else if !errors.Is(err, transport.ErrNotConnected) {
		s.log.Debug("send failed", "to", o.To.String(), "msg", o.Msg.String(), "err", err)
	}
}

// persist makes records durable, retrying with backoff until it succeeds or
// the server stops: nothing is sent (so nothing is acknowledged) meanwhile.
// It reports whether the loop should go on.
func (s *Server) persist(ctx context.Context, recs []core.Record) bool {
	if len(recs) == 0 {
		return true
	}
	ops := make([]store.Op, 0, len(recs))
	var endorseKey []byte
	for _, r := range recs {
		if r.Bucket == core.BucketEndorseKey {
			endorseKey = r.Value // the newest state wins
			continue
		}
		ops = append(ops, store.Op{Bucket: r.Bucket, Key: r.Key, Value: r.Value, Delete: r.Delete})
	}
	if endorseKey != nil && !s.persistEndorseKey(ctx, endorseKey) {
		return false
	}
	if len(ops) == 0 {
		return true
	}
	backoff := 10 * time.Millisecond
	for failed := 0; ; failed++ {
		err := s.store.Commit(ctx, ops...)
		if err == nil {
			if failed > 0 {
				s.log.Info("the disk accepts writes again: sending the replies held", "records", len(ops), "failed_tries", failed)
			}
			return true
		}
		if ctx.Err() != nil {
			return false
		}
		if errors.Is(err, store.ErrFailed) {
			return false // never retried; watchStore stops the server (docs/protocol.md change 69)
		}
		s.log.Error("cannot persist; holding every reply until the disk accepts writes again", "records", len(ops), "err", err, "retry_in", backoff)
		select {
		case <-ctx.Done():
			return false
		case <-time.After(backoff):
		}
		backoff = min(2*backoff, 2*time.Second)
	}
}

// persistEndorseKey overwrites the member's endorsement key state in its
// file, in place, before the batch's store records (docs/protocol.md change
// 64: a key is destroyed before the endorsement it signed leaves), retrying
// as persist does. It reports whether the loop should go on.
func (s *Server) persistEndorseKey(ctx context.Context, state []byte) bool {
	backoff := 10 * time.Millisecond
	for {
		err := certs.NewEndorseKeyStore(s.Material.Dir).Write(state)
		if err == nil {
			return true
		}
		s.log.Error("cannot destroy the endorsement key just used; holding every reply until it is", "err", err, "retry_in", backoff)
		select {
		case <-ctx.Done():
			return false
		case <-time.After(backoff):
		}
		backoff = min(2*backoff, 2*time.Second)
	}
}

// revoke stops admitting the clients the core just revoked and closes their
// connections (docs/protocol.md change 23).
func (s *Server) revoke(clients []wire.ClientID) {
	for _, c := range clients {
		s.log.Warn("client revoked by the operator: refusing its connections and its leases", "client", c.String())
		if s.admission != nil {
			s.admission.revoke(c)
		}
		if d, ok := s.transport.(clientDisconnecter); ok {
			d.DisconnectClient(c, fmt.Sprintf("client %s is not admitted: it was revoked by the cluster's operator", c.Hex()[:16]))
		}
	}
}

// expire closes the connections of clients whose admission certificate
// expired while they were connected (docs/protocol.md change 23); the door
// refuses them from then on.
func (s *Server) expire(clients []wire.ClientID) {
	for _, c := range clients {
		s.log.Warn("a connected client's admission certificate expired: closing its connection", "client", c.String())
		if d, ok := s.transport.(clientDisconnecter); ok {
			d.DisconnectClient(c, fmt.Sprintf("client %s is not admitted: its admission certificate expired", c.Hex()[:16]))
		}
	}
}

// coreInput translates a transport event for the core; bad input stays in the runtime.
func coreInput(in transport.Inbound) (core.Input, bool) {
	switch in.Kind {
	case transport.EventMessage:
		return core.Input{Kind: core.InputMessage, From: in.From, Msg: in.Msg}, true
	case transport.EventConnected:
		return core.Input{Kind: core.InputConnected, From: in.From, Admission: in.Admission, Observes: in.Observes}, true
	case transport.EventDisconnected:
		return core.Input{Kind: core.InputDisconnected, From: in.From}, true
	}
	return core.Input{}, false
}

func (s *Server) observe(in transport.Inbound) {
	switch in.Kind {
	case transport.EventConnected, transport.EventDisconnected:
		if !in.From.IsClient {
			s.log.Info("peer "+in.Kind.String(), "peer", in.From.String())
		} else {
			s.log.Debug("client "+in.Kind.String(), "client", in.From.String())
		}
	case transport.EventBadInput:
		s.log.Warn("bad input from peer", "peer", in.From.String(), "err", in.Err)
	}
}

// count adds a received message to the traffic counters.
func (s *Server) count(in transport.Inbound) {
	if in.Kind != transport.EventMessage {
		return
	}
	t := &s.metrics.FromServers
	if in.From.IsClient {
		t = &s.metrics.FromClients
	}
	t.Messages.Inc()
	t.Bytes.Add(float64(in.Size))
}

// countOut adds a message queued for to to the traffic counters.
func (s *Server) countOut(to transport.Peer) {
	if to.IsClient {
		s.metrics.ToClients.Messages.Inc()
	} else {
		s.metrics.ToServers.Messages.Inc()
	}
}

// publish copies the core's counters for the metrics endpoint.
func (s *Server) publish(now time.Time) {
	s.published = now
	k, ok := s.core.(*core.Core)
	if !ok {
		return
	}
	snap := metrics.Snapshot{
		Incarnation: s.Incarnation,
		Accesses:    make(map[string]uint64, len(k.Stats.Accesses)),
		Pushes:      k.Stats.Pushes, ListensHeld: k.Stats.ListensHeld, Forwards: k.Stats.Forwards, Suspicions: k.Stats.VotesCast,
		Resets: k.Stats.Resets, Bans: k.Stats.Bans, Equivocation: k.Stats.Equivocation,
		Rejected: k.Stats.Rejected, Stale: k.Stats.Stale, Announced: k.Stats.Announced, Pulled: k.Stats.Pulled, CacheHits: k.Stats.CacheHits, CacheMisses: k.Stats.CacheMisses,
		Remembered: crypto.VerdictHits(),
	}
	for kind, n := range k.Stats.Accesses {
		snap.Accesses[kind] = n
	}
	snap.Limited = maps.Clone(k.Stats.Limited)
	s.connLimits.addTo(snap.Limited)
	snap.Locks, snap.Members, snap.MaxMembers, snap.Suspected, snap.Banned = k.Gauges()
	s.metrics.Publish(snap)
}

// Addr is the address this server serves on.
func (s *Server) Addr() string { return s.Material.Address }

// epochCore is a core that follows the cluster's epochs (change 43).
type epochCore interface {
	Chain() *wire.Chain
	Epoch() (serves, knows uint64)
}

// admitCAs gives the door the client CAs in force of the epochs the core
// knows (a client-CA rotation, change 43).
func (s *Server) admitCAs() {
	k, ok := s.core.(epochCore)
	if !ok || k.Chain() == nil || s.admission == nil {
		return
	}
	inForce, _ := k.Chain().ClientCAs(s.Material.Cluster.ClientCA)
	for _, c := range s.admission.setCAs(inForce) {
		s.log.Warn("a connected client's certificate is of a client CA now retired: closing its connection", "client", c.String())
		if d, ok := s.transport.(clientDisconnecter); ok {
			d.DisconnectClient(c, "its admission certificate's client CA was retired (bqserver ca retire-clients): connect with a certificate of the CA in force")
		}
	}
}

// followEpochs dials the servers of a newly adopted epoch and stops dialing
// those no epoch this server deals with names (docs/protocol.md change 43).
func (s *Server) followEpochs() error {
	k, ok := s.core.(epochCore)
	if !ok || k.Chain() == nil {
		return nil
	}
	s.epochAlarms(k)
	serves, knows := k.Epoch()
	if p := s.preverifier.Load(); p.Keys == nil || p.Keys.Epoch != serves {
		if keys, _, ok := k.Chain().Keyring(serves); ok {
			s.preverifier.Store(&wire.Preverifier{Keys: &keys, Self: s.Material.ID})
		}
	}
	if serves == s.serves && knows == s.knows {
		return nil // every batch asks; only a new epoch costs anything
	}
	switch {
	case serves != s.serves && serves < knows:
		s.log.Info("took the state of an epoch already sealed; copying the next", "epoch", serves, "newest", knows)
	case serves != s.serves:
		if b := k.Chain().Body(serves); b != nil {
			s.log.Info("serving the cluster's epoch", "epoch", serves, "n", b.N(), "f", b.F, "quorum", b.Quorum())
		} else {
			s.log.Info("serving the cluster's epoch", "epoch", serves)
		}
	}
	s.serves, s.knows = serves, knows
	with := []uint64{knows - min(knows, 1)}
	if keys, _, ok := k.Chain().Keyring(serves); ok && keys.Key(s.Material.ID) != nil {
		with = append(with, serves) // a sealed member hands its state to the next epoch's
	}
	changed, err := s.roster.Follow(k.Chain(), knows, with...)
	if err != nil || !changed {
		return err
	}
	s.admitCAs()
	if s.certificates.Load() != nil {
		s.noteCertificates() // a rotation changes the CA in force
	}
	if r, ok := s.transport.(transport.Retrustable); ok {
		r.SetCAPool(s.roster.CAPool()) // a rotation's next CA issued the newer members' certificates
	}
	if r, ok := s.transport.(transport.Reconfigurable); ok {
		r.SetServers(s.roster.Addresses(&s.Material.ID))
		s.log.Info("the cluster is in a new epoch: dialing the servers of the epochs this one deals with", "serves", serves, "knows", knows)
	}
	return nil
}

// epochAlarms says, once each, what shows keys or this server's store
// beyond what bq tolerates (docs/protocol.md change 64), in the log and
// the metric bq_epoch_alarms_total.
func (s *Server) epochAlarms(k epochCore) {
	if c := k.Chain().Conflict(); c != nil && !s.conflictSaid {
		s.conflictSaid = true
		s.metrics.EpochAlarms.WithLabelValues("conflict").Inc()
		h, o := wire.EpochHash(c.Held.Signed), wire.EpochHash(c.Shown.Signed)
		s.log.Error("ALARM: two epochs of one number, each signed by the cluster CA and endorsed by a quorum of the epoch before: "+
			"keys beyond what bq tolerates have leaked. This server refuses both from now on and adopts no later epoch. "+
			"Stop every client; find which epoch you made (bqserver server list shows the one each server holds); the cluster cannot go on safely: make a new one (bqserver init) and move the clients to it",
			"epoch", c.Number, "held", fmt.Sprintf("%x", h[:8]), "shown", fmt.Sprintf("%x", o[:8]))
	}
	if kc, ok := k.(*core.Core); ok && kc.Stats.EndorsementsForgotten > s.forgottenSaid {
		s.forgottenSaid = kc.Stats.EndorsementsForgotten
		s.metrics.EpochAlarms.WithLabelValues("forgotten-endorsement").Inc()
		s.log.Error("ALARM: an epoch carries this server's endorsement that its store did not remember: its data directory is older than what it signed (put back from a backup?). "+
			"It now remembers the endorsement, so it endorses no other epoch of that number; but it may have forgotten votes and acks too: replace it (bqserver server replace)",
			"server", s.Material.ID.String())
	}
}

// ID is this server's id.
func (s *Server) ID() wire.ServerID { return s.Material.ID }

// Close stops serving, waits for the loop, and closes the transport and the store.
func (s *Server) Close() error {
	s.closeOnce.Do(func() {
		s.cancel()
		<-s.done
		<-s.committed
		var herr error
		if s.http != nil {
			herr = s.http.Close()
		}
		serr := s.store.Close()
		if s.Failure() != nil {
			serr = nil // the store's failure is Failure's, not Close's
		}
		s.closeErr = errors.Join(s.transport.Close(), serr, herr)
		s.log.Info("server stopped")
	})
	return s.closeErr
}
