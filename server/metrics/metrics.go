// Package metrics is a server's Prometheus metrics (client_golang): the
// counters and gauges the protocol core keeps, published by the server loop
// as a Snapshot and collected from it at each scrape; histograms of the
// durable store's commits; traffic counters the runtime bumps as it goes;
// the expiry of the certificates the server depends on, with the warnings
// logged ahead of it; and the standard go_* and process_* collectors.
package metrics

import (
	"context"
	"crypto/x509"
	"fmt"
	"log/slog"
	"net/http"
	"sort"
	"sync/atomic"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/collectors"
	"github.com/prometheus/client_golang/prometheus/promhttp"
)

// Snapshot is what the protocol core counts, copied out of the server loop
// (which owns the core) for the next scrape.
type Snapshot struct {
	Incarnation uint64
	// Accesses by kind: doorway, ticket, held, exit, listen, getset, read, status.
	Accesses map[string]uint64
	// Limited: requests refused by a limit, by the limit's settings key
	// (docs/protocol.md change 25).
	Limited      map[string]uint64
	Pushes       uint64
	ListensHeld  uint64 // Listens held until nothing was ahead of their client (change 27)
	Forwards     uint64
	Suspicions   uint64 // Suspect votes this server cast
	Resets       uint64 // reset certificates applied
	Bans         uint64 // clients banned on evidence
	Equivocation uint64
	Rejected     uint64
	Stale        uint64 // client statements older than the one held: refused, benign
	Announced    uint64 // statement references announced to the other servers
	Pulled       uint64 // statements asked of other servers
	CacheHits    uint64
	CacheMisses  uint64
	// Remembered counts signature checks answered by an identical earlier
	// check, mostly one a connection's read loop made (process-wide).
	Remembered uint64
	// Locks is the number of locks with members; Members sums their active
	// sets; MaxMembers is the largest one.
	Locks, Members, MaxMembers int
	// Suspected is the number of clients this server suspects now.
	Suspected int
	// Banned is the number of clients banned now.
	Banned int
}

// Buckets of the commit histograms. A durable commit (one fdatasync of the
// write-ahead log) takes 0.25 ms alone and 1 to 2 ms under load on the
// machines of docs/performance.md, with a tail to tens of milliseconds on a
// busy disk; a commit holds 1 to a few hundred records (8 at 16 writers).
var (
	FsyncBuckets  = []float64{50e-6, 100e-6, 250e-6, 500e-6, 1e-3, 2.5e-3, 5e-3, 10e-3, 25e-3, 50e-3, 100e-3, 250e-3, 500e-3, 1, 2.5}
	RecordBuckets = prometheus.ExponentialBuckets(1, 2, 11) // 1 … 1024
)

// Traffic counts messages (and, where the size is known, bytes) live, as the
// server loop handles them.
type Traffic struct {
	Messages prometheus.Counter
	Bytes    prometheus.Counter
}

// Registry holds one server's metrics. Every metric carries the label
// server="s<id>".
type Registry struct {
	prom *prometheus.Registry
	snap atomic.Pointer[Snapshot]
	// Fsync and Batches observe each durable commit: its latency in seconds
	// and its number of records.
	Fsync, Batches prometheus.Histogram
	// FromClients and FromServers count decoded messages received (and their
	// encoded bytes); ToClients and ToServers count messages queued to send.
	FromClients, FromServers, ToClients, ToServers Traffic
	// Overflows counts messages to servers dropped on a full send queue;
	// Repairs counts the resyncs that made up for them (core.Repair).
	Overflows, Repairs prometheus.Counter
	// EpochAlarms counts what says this server's keys or store are not what
	// bq assumes (docs/protocol.md change 64): kind "conflict", two epochs
	// of one number both signed and endorsed; kind "forgotten-endorsement",
	// an epoch carrying this server's endorsement that its store did not
	// remember (a store older than what it signed).
	EpochAlarms *prometheus.CounterVec
	// StoreFailed is 1 once the store failed for good and the server
	// stopped itself (docs/protocol.md change 69); ScrubBytes, ScrubPasses
	// and ScrubChecked follow the background scrub: bytes of values
	// checked, whole passes, values checked in the pass under way.
	StoreFailed             prometheus.Gauge
	ScrubBytes, ScrubPasses prometheus.Counter
	ScrubChecked            prometheus.Gauge
	// expiry is bq_certificate_expiry_timestamp_seconds by certificate
	// (SetCertificateExpiry).
	expiry *prometheus.GaugeVec
}

// NewRegistry makes the metrics of server (its id, "s0").
func NewRegistry(server string) *Registry {
	r := &Registry{prom: prometheus.NewRegistry()}
	r.prom.MustRegister(collectors.NewGoCollector(), collectors.NewProcessCollector(collectors.ProcessCollectorOpts{}))
	reg := prometheus.WrapRegistererWith(prometheus.Labels{"server": server}, r.prom)
	r.Fsync = prometheus.NewHistogram(prometheus.HistogramOpts{
		Name: "bq_fsync_seconds", Help: "Durable commit (write and fdatasync of the write-ahead log) latency.", Buckets: FsyncBuckets,
	})
	r.Batches = prometheus.NewHistogram(prometheus.HistogramOpts{
		Name: "bq_commit_records", Help: "Records per durable commit (group commit size).", Buckets: RecordBuckets,
	})
	messages := func(name, help, dir, who string) prometheus.Counter {
		return prometheus.NewCounter(prometheus.CounterOpts{Name: name, Help: help, ConstLabels: prometheus.Labels{dir: who}})
	}
	const (
		in, out = "Messages received and decoded, by the kind of sender.", "Messages queued to send, by the kind of receiver."
		inBytes = "Encoded bytes of the messages received, by the kind of sender."
	)
	r.FromClients = Traffic{messages("bq_messages_in_total", in, "from", "client"), messages("bq_bytes_in_total", inBytes, "from", "client")}
	r.FromServers = Traffic{messages("bq_messages_in_total", in, "from", "server"), messages("bq_bytes_in_total", inBytes, "from", "server")}
	r.ToClients = Traffic{Messages: messages("bq_messages_out_total", out, "to", "client")}
	r.ToServers = Traffic{Messages: messages("bq_messages_out_total", out, "to", "server")}
	r.Overflows = prometheus.NewCounter(prometheus.CounterOpts{Name: "bq_send_overflows_total", Help: "Messages to other servers dropped because the peer's send queue was full."})
	r.Repairs = prometheus.NewCounter(prometheus.CounterOpts{Name: "bq_overflow_repairs_total", Help: "Resynchronisations with a server after its send queue overflowed."})
	r.expiry = prometheus.NewGaugeVec(prometheus.GaugeOpts{
		Name: "bq_certificate_expiry_timestamp_seconds",
		Help: "When a certificate this server depends on expires (its NotAfter), in Unix seconds, by certificate: cluster_ca, server (its own TLS certificate).",
	}, []string{"certificate"})
	r.EpochAlarms = prometheus.NewCounterVec(prometheus.CounterOpts{Name: "bq_epoch_alarms_total",
		Help: "Alarms that keys or a store are beyond what bq tolerates: two epochs of one number both signed and endorsed (kind=conflict), or an epoch carrying this server's endorsement that its store did not remember (kind=forgotten-endorsement). Either needs the operator: see the runbook."}, []string{"kind"})
	r.StoreFailed = prometheus.NewGauge(prometheus.GaugeOpts{Name: "bq_store_failed",
		Help: "1 once this server's store failed for good (its disk changed what it stored, an fdatasync failed, or an I/O error): it stopped voting, signing and answering, and exits with code 9."})
	r.ScrubBytes = prometheus.NewCounter(prometheus.CounterOpts{Name: "bq_store_scrub_bytes_total", Help: "Bytes of stored values the background scrub read and checked against their tags."})
	r.ScrubPasses = prometheus.NewCounter(prometheus.CounterOpts{Name: "bq_store_scrub_passes_total", Help: "Whole passes of the background scrub over the store, each value checked once."})
	r.ScrubChecked = prometheus.NewGauge(prometheus.GaugeOpts{Name: "bq_store_scrub_pass_values", Help: "Values the background scrub checked in the pass under way."})
	reg.MustRegister(r.Fsync, r.Batches, r.Overflows, r.Repairs, r.EpochAlarms, r.expiry, snapshotCollector{r},
		r.StoreFailed, r.ScrubBytes, r.ScrubPasses, r.ScrubChecked)
	for _, t := range []Traffic{r.FromClients, r.FromServers, r.ToClients, r.ToServers} {
		reg.MustRegister(t.Messages)
		if t.Bytes != nil {
			reg.MustRegister(t.Bytes)
		}
	}
	return r
}

// SetCertificateExpiry sets bq_certificate_expiry_timestamp_seconds of each
// certificate the server depends on (ServerCertificates). The runtime calls
// it at start and again when a CA rotation changes the CA in force.
func (r *Registry) SetCertificateExpiry(certs []Certificate) {
	for _, c := range certs {
		r.expiry.WithLabelValues(c.Label).Set(float64(c.NotAfter.Unix()))
	}
}

// Publish replaces the snapshot the next scrape reports.
func (r *Registry) Publish(s Snapshot) { r.snap.Store(&s) }

// Handler serves the metrics in the Prometheus exposition formats.
func (r *Registry) Handler() http.Handler {
	return promhttp.HandlerFor(r.prom, promhttp.HandlerOpts{Registry: r.prom})
}

// Gatherer is the registry, for tests and for embedding in another one.
func (r *Registry) Gatherer() prometheus.Gatherer { return r.prom }

// snapshotCollector reports the latest Snapshot as constant metrics: the
// core's state belongs to the server loop, which copies it out (the
// exporter pattern of client_golang).
type snapshotCollector struct{ r *Registry }

var (
	descIncarnation = prometheus.NewDesc("bq_server_incarnation", "Runs of this server so far (bumped durably at every start).", nil, nil)
	descAccesses    = prometheus.NewDesc("bq_accesses_total", "Client accesses served, by kind.", []string{"kind"}, nil)
	descLimited     = prometheus.NewDesc("bq_limit_refusals_total", "Client requests refused by a limit, by the limit's settings key.", []string{"limit"}, nil)
	counterDescs    = []struct {
		d   *prometheus.Desc
		get func(*Snapshot) uint64
	}{
		{prometheus.NewDesc("bq_pushes_total", "Listener pushes sent (LISTEN and getSet updates).", nil, nil), func(s *Snapshot) uint64 { return s.Pushes }},
		{prometheus.NewDesc("bq_listens_held_total", "LISTENs held until no member was ahead of their client here, then answered by one push (herd-free, docs/protocol.md change 27).", nil, nil), func(s *Snapshot) uint64 { return s.ListensHeld }},
		{prometheus.NewDesc("bq_forwards_total", "Objects forwarded to other servers (statements, votes, certificates, evidence).", nil, nil), func(s *Snapshot) uint64 { return s.Forwards }},
		{prometheus.NewDesc("bq_suspicions_total", "Suspect votes this server cast (expired leases, overdue Doorways).", nil, nil), func(s *Snapshot) uint64 { return s.Suspicions }},
		{prometheus.NewDesc("bq_resets_total", "Reset certificates applied.", nil, nil), func(s *Snapshot) uint64 { return s.Resets }},
		{prometheus.NewDesc("bq_bans_total", "Clients banned on transferable evidence.", nil, nil), func(s *Snapshot) uint64 { return s.Bans }},
		{prometheus.NewDesc("bq_equivocations_total", "Equivocating statement pairs seen.", nil, nil), func(s *Snapshot) uint64 { return s.Equivocation }},
		{prometheus.NewDesc("bq_rejected_total", "Client requests refused with an error (stale statements not included).", nil, nil), func(s *Snapshot) uint64 { return s.Rejected }},
		{prometheus.NewDesc("bq_stale_total", "Client statements refused because a newer one of the same client is held (a resend or a late copy: benign).", nil, nil), func(s *Snapshot) uint64 { return s.Stale }},
		{prometheus.NewDesc("bq_announced_total", "Statement references announced to the other servers (lazy dissemination).", nil, nil), func(s *Snapshot) uint64 { return s.Announced }},
		{prometheus.NewDesc("bq_pulled_total", "Statements this server asked another for after an announcement.", nil, nil), func(s *Snapshot) uint64 { return s.Pulled }},
		{prometheus.NewDesc("bq_verify_cache_hits_total", "Statement signature checks answered from the cache.", nil, nil), func(s *Snapshot) uint64 { return s.CacheHits }},
		{prometheus.NewDesc("bq_verify_cache_misses_total", "Statement signatures verified.", nil, nil), func(s *Snapshot) uint64 { return s.CacheMisses }},
		{prometheus.NewDesc("bq_signature_checks_remembered_total", "Signature checks answered by an identical earlier check, most made ahead in a connection's read loop, in parallel (docs/protocol.md §1).", nil, nil), func(s *Snapshot) uint64 { return s.Remembered }},
	}
	gaugeDescs = []struct {
		d   *prometheus.Desc
		get func(*Snapshot) int
	}{
		{prometheus.NewDesc("bq_locks_in_use", "Locks with a non-empty active set.", nil, nil), func(s *Snapshot) int { return s.Locks }},
		{prometheus.NewDesc("bq_active_set_members", "Members of all active sets.", nil, nil), func(s *Snapshot) int { return s.Members }},
		{prometheus.NewDesc("bq_active_set_max", "Size of the largest active set.", nil, nil), func(s *Snapshot) int { return s.MaxMembers }},
		{prometheus.NewDesc("bq_clients_suspected", "Clients with a session this server suspects and no certificate reset yet.", nil, nil), func(s *Snapshot) int { return s.Suspected }},
		{prometheus.NewDesc("bq_clients_banned", "Clients banned.", nil, nil), func(s *Snapshot) int { return s.Banned }},
	}
)

func (c snapshotCollector) Describe(ch chan<- *prometheus.Desc) {
	ch <- descIncarnation
	ch <- descAccesses
	ch <- descLimited
	for _, m := range counterDescs {
		ch <- m.d
	}
	for _, m := range gaugeDescs {
		ch <- m.d
	}
}

func (c snapshotCollector) Collect(ch chan<- prometheus.Metric) {
	s := c.r.snap.Load()
	if s == nil {
		s = &Snapshot{}
	}
	ch <- prometheus.MustNewConstMetric(descIncarnation, prometheus.GaugeValue, float64(s.Incarnation))
	kinds := make([]string, 0, len(s.Accesses))
	for k := range s.Accesses {
		kinds = append(kinds, k)
	}
	sort.Strings(kinds)
	for _, k := range kinds {
		ch <- prometheus.MustNewConstMetric(descAccesses, prometheus.CounterValue, float64(s.Accesses[k]), k)
	}
	for _, name := range sortedKeys(s.Limited) {
		ch <- prometheus.MustNewConstMetric(descLimited, prometheus.CounterValue, float64(s.Limited[name]), name)
	}
	for _, m := range counterDescs {
		ch <- prometheus.MustNewConstMetric(m.d, prometheus.CounterValue, float64(m.get(s)))
	}
	for _, m := range gaugeDescs {
		ch <- prometheus.MustNewConstMetric(m.d, prometheus.GaugeValue, float64(m.get(s)))
	}
}

func sortedKeys(m map[string]uint64) []string {
	out := make([]string, 0, len(m))
	for k := range m {
		out = append(out, k)
	}
	sort.Strings(out)
	return out
}

// Certificate expiry (issue 28: every expiry visible ahead). A server
// depends on the cluster CA and on its own TLS certificate: past its
// NotAfter the other servers and the clients refuse the certificate, and
// the server does not start with it. The metric shows when; the warnings
// say so in the log from ExpiryWarnBefore ahead.

// ExpiryWarnBefore is how long before a certificate expires the server
// warns (and bqserver server list marks it).
const ExpiryWarnBefore = 30 * 24 * time.Hour

// The certificate label values of bq_certificate_expiry_timestamp_seconds.
const (
	CertClusterCA = "cluster_ca"
	CertServer    = "server"
)

// Certificate is one certificate a server depends on.
type Certificate struct {
	Label    string // its certificate label: CertClusterCA, CertServer
	What     string // for people: "the cluster CA"
	NotAfter time.Time
}

// ServerCertificates are the certificates a server depends on: the cluster
// CA in force (the one that signs the next epoch and issues new members'
// certificates) and its own TLS certificate (MemberCertificate).
func ServerCertificates(clusterCA, own, retiredIssuer *x509.Certificate) []Certificate {
	return []Certificate{
		{Label: CertClusterCA, What: "the cluster CA", NotAfter: clusterCA.NotAfter},
		MemberCertificate("this server's", own, retiredIssuer),
	}
}

// MemberCertificate is a member's TLS certificate as it expires: a
// certificate is valid only while its issuer is, so when a rotation retired
// the CA that issued it (retiredIssuer; nil if its issuer is the CA in
// force) and that CA ends first, the member expires with it — and a
// replace, which gives it a certificate of the CA in force, is what to do,
// not another rotation. whose names the member: "this server's", "server
// 3's".
func MemberCertificate(whose string, leaf, retiredIssuer *x509.Certificate) Certificate {
	c := Certificate{Label: CertServer, What: whose + " TLS certificate", NotAfter: leaf.NotAfter}
	if retiredIssuer != nil && retiredIssuer.NotAfter.Before(leaf.NotAfter) {
		c.What, c.NotAfter = "the retired cluster CA that issued "+whose+" TLS certificate", retiredIssuer.NotAfter
	}
	return c
}

// ExpiryWarning is one certificate that expires within ExpiryWarnBefore of
// now, or has expired.
type ExpiryWarning struct {
	Certificate
	Expired  bool
	DaysLeft int // whole days left; 0 or less once expired
	Msg      string
	Todo     string // what the operator should do
}

// What the operator does about a certificate that is about to expire: the
// README's runbook, "certificates expire soon" (docs/protocol.md change 43).
const (
	todoServer = "renew it, with new keys, by `bqserver server replace ID --dir DIR --host H --port P` (the same host, a free port) and start the new member it prints"
	todoCA     = "rotate it by `bqserver ca rotate --dir DIR`, then `bqserver server replace` each member (README: certificates expire soon)"
)

// ExpiryWarnings returns a warning for each of certs that expires within
// ExpiryWarnBefore of now (31 days ahead: none; 29 days: one) or has
// expired. It reads no clock: the caller gives now.
func ExpiryWarnings(now time.Time, certs []Certificate) []ExpiryWarning {
	var out []ExpiryWarning
	for _, c := range certs {
		left := c.NotAfter.Sub(now)
		if left >= ExpiryWarnBefore {
			continue
		}
		w := ExpiryWarning{Certificate: c, DaysLeft: int(left / (24 * time.Hour)), Todo: todoServer}
		if c.Label == CertClusterCA {
			w.Todo = todoCA
		}
		date := c.NotAfter.UTC().Format(time.RFC3339)
		if left <= 0 {
			w.Expired = true
			w.Msg = fmt.Sprintf("%s expired on %s: servers and clients refuse it", c.What, date)
		} else if w.DaysLeft == 0 {
			w.Msg = fmt.Sprintf("%s expires within a day, on %s", c.What, date)
		} else {
			w.Msg = fmt.Sprintf("%s expires in %d days, on %s", c.What, w.DaysLeft, date)
		}
		out = append(out, w)
	}
	return out
}

// WarnExpiry logs at Warn each certificate the server depends on that
// expires within ExpiryWarnBefore: now, then once a day, until ctx ends.
// certs gives them as they are at each look (a CA rotation changes the CA
// in force while the server runs); it must be safe to call from another
// goroutine.
func WarnExpiry(ctx context.Context, log *slog.Logger, certs func() []Certificate) {
	t := time.NewTicker(24 * time.Hour)
	defer t.Stop()
	warnExpiry(ctx, log, certs, time.Now(), t.C)
}

// warnExpiry is WarnExpiry with its clock given: it logs as of start, then
// as of the time of each tick.
func warnExpiry(ctx context.Context, log *slog.Logger, certs func() []Certificate, start time.Time, tick <-chan time.Time) {
	for now := start; ; {
		for _, w := range ExpiryWarnings(now, certs()) {
			log.Warn(w.Msg, "certificate", w.Label, "not_after", w.NotAfter.UTC().Format(time.RFC3339), "days_left", w.DaysLeft, "todo", w.Todo)
		}
		select {
		case <-ctx.Done():
			return
		case now = <-tick:
		}
	}
}
