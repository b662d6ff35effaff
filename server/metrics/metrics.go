// Package metrics renders a server's counters in the Prometheus text
// exposition format (version 0.0.4), without a client library: a Snapshot
// is published by the server loop and served as is.
package metrics

import (
	"fmt"
	"io"
	"math"
	"net/http"
	"sort"
	"strings"
	"sync"
	"sync/atomic"
	"time"
)

// Snapshot is everything a scrape shows, copied out of the server loop.
type Snapshot struct {
	Server      string
	Incarnation uint64
	// Accesses by kind: doorway, ticket, held, exit, listen, getset, read, status.
	Accesses     map[string]uint64
	Pushes       uint64
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
	// Locks is the number of locks with members; Members sums their active
	// sets; MaxMembers is the largest one.
	Locks, Members, MaxMembers int
	// Suspected is the number of clients this server suspects now.
	Suspected int
	// Banned is the number of clients banned now.
	Banned int
}

// Histogram is a fixed-bucket histogram safe for concurrent Observe.
// INVARIANT: bounds ascend; counts[i] counts observations in (bounds[i-1], bounds[i]].
type Histogram struct {
	bounds  []float64
	counts  []atomic.Uint64
	count   atomic.Uint64
	sumNano atomic.Uint64 // the sum of observations, in billionths
}

// NewHistogram makes a histogram with the given upper bounds.
func NewHistogram(bounds ...float64) *Histogram {
	return &Histogram{bounds: bounds, counts: make([]atomic.Uint64, len(bounds))}
}

// FsyncBuckets suits disk commit latencies: 100 µs to 2.5 s.
func FsyncBuckets() *Histogram {
	return NewHistogram(0.0001, 0.00025, 0.0005, 0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1, 2.5)
}

// Observe records one value.
func (h *Histogram) Observe(v float64) {
	for i, b := range h.bounds {
		if v <= b {
			h.counts[i].Add(1)
			break
		}
	}
	h.count.Add(1)
	h.sumNano.Add(uint64(v * 1e9))
}

// ObserveDuration records one duration in seconds.
func (h *Histogram) ObserveDuration(d time.Duration) { h.Observe(d.Seconds()) }

// Traffic counts messages (and, where the size is known, bytes) live, as the
// server loop handles them: not through the snapshot.
type Traffic struct {
	Messages atomic.Uint64
	Bytes    atomic.Uint64
}

// Registry holds the latest snapshot, the histograms and the traffic counters.
type Registry struct {
	mu      sync.Mutex
	snap    Snapshot
	Fsync   *Histogram
	Batches *Histogram // records per commit
	// FromClients and FromServers count decoded messages received (and their
	// encoded bytes); ToClients and ToServers count messages queued to send.
	FromClients, FromServers, ToClients, ToServers Traffic
	// Overflows counts messages to servers dropped on a full send queue;
	// Repairs counts the resyncs that made up for them (core.Repair).
	Overflows, Repairs atomic.Uint64
}

// NewRegistry makes an empty registry.
func NewRegistry() *Registry {
	return &Registry{Fsync: FsyncBuckets(), Batches: NewHistogram(1, 2, 4, 8, 16, 32, 64, 128, 256, 1024, 4096)}
}

// Publish replaces the snapshot.
func (r *Registry) Publish(s Snapshot) {
	r.mu.Lock()
	r.snap = s
	r.mu.Unlock()
}

// ServeHTTP renders the metrics.
func (r *Registry) ServeHTTP(w http.ResponseWriter, _ *http.Request) {
	w.Header().Set("Content-Type", "text/plain; version=0.0.4; charset=utf-8")
	_ = r.Write(w)
}

// Write renders the metrics in the text format.
func (r *Registry) Write(w io.Writer) error {
	r.mu.Lock()
	s := r.snap
	r.mu.Unlock()
	var b strings.Builder
	lbl := fmt.Sprintf(`server=%q`, s.Server)
	metric := func(name, typ, help string) {
		fmt.Fprintf(&b, "# HELP %s %s\n# TYPE %s %s\n", name, help, name, typ)
	}
	one := func(name, typ, help string, v float64) {
		metric(name, typ, help)
		fmt.Fprintf(&b, "%s{%s} %s\n", name, lbl, num(v))
	}
	one("bq_server_incarnation", "gauge", "Runs of this server so far (bumped durably at every start).", float64(s.Incarnation))
	metric("bq_accesses_total", "counter", "Client accesses served, by kind.")
	kinds := make([]string, 0, len(s.Accesses))
	for k := range s.Accesses {
		kinds = append(kinds, k)
	}
	sort.Strings(kinds)
	for _, k := range kinds {
		fmt.Fprintf(&b, "bq_accesses_total{%s,kind=%q} %d\n", lbl, k, s.Accesses[k])
	}
	one("bq_pushes_total", "counter", "Listener pushes sent (LISTEN and getSet updates).", float64(s.Pushes))
	one("bq_forwards_total", "counter", "Objects forwarded to other servers (statements, votes, certificates, evidence).", float64(s.Forwards))
	one("bq_suspicions_total", "counter", "Suspect votes this server cast (expired leases, overdue Doorways).", float64(s.Suspicions))
	one("bq_resets_total", "counter", "Reset certificates applied.", float64(s.Resets))
	one("bq_bans_total", "counter", "Clients banned on transferable evidence.", float64(s.Bans))
	one("bq_equivocations_total", "counter", "Equivocating statement pairs seen.", float64(s.Equivocation))
	one("bq_rejected_total", "counter", "Client requests refused with an error (stale statements not included).", float64(s.Rejected))
	one("bq_stale_total", "counter", "Client statements refused because a newer one of the same client is held (a resend or a late copy: benign).", float64(s.Stale))
	one("bq_announced_total", "counter", "Statement references announced to the other servers (lazy dissemination).", float64(s.Announced))
	one("bq_pulled_total", "counter", "Statements this server asked another for after an announcement.", float64(s.Pulled))
	one("bq_verify_cache_hits_total", "counter", "Statement signature checks answered from the cache.", float64(s.CacheHits))
	one("bq_verify_cache_misses_total", "counter", "Statement signatures verified.", float64(s.CacheMisses))
	one("bq_locks_in_use", "gauge", "Locks with a non-empty active set.", float64(s.Locks))
	one("bq_active_set_members", "gauge", "Members of all active sets.", float64(s.Members))
	one("bq_active_set_max", "gauge", "Size of the largest active set.", float64(s.MaxMembers))
	one("bq_clients_suspected", "gauge", "Clients with a session this server suspects and no certificate reset yet.", float64(s.Suspected))
	one("bq_clients_banned", "gauge", "Clients banned.", float64(s.Banned))
	metric("bq_messages_in_total", "counter", "Messages received and decoded, by the kind of sender.")
	fmt.Fprintf(&b, "bq_messages_in_total{%s,from=\"client\"} %d\n", lbl, r.FromClients.Messages.Load())
	fmt.Fprintf(&b, "bq_messages_in_total{%s,from=\"server\"} %d\n", lbl, r.FromServers.Messages.Load())
	metric("bq_bytes_in_total", "counter", "Encoded bytes of the messages received, by the kind of sender.")
	fmt.Fprintf(&b, "bq_bytes_in_total{%s,from=\"client\"} %d\n", lbl, r.FromClients.Bytes.Load())
	fmt.Fprintf(&b, "bq_bytes_in_total{%s,from=\"server\"} %d\n", lbl, r.FromServers.Bytes.Load())
	metric("bq_messages_out_total", "counter", "Messages queued to send, by the kind of receiver.")
	fmt.Fprintf(&b, "bq_messages_out_total{%s,to=\"client\"} %d\n", lbl, r.ToClients.Messages.Load())
	fmt.Fprintf(&b, "bq_messages_out_total{%s,to=\"server\"} %d\n", lbl, r.ToServers.Messages.Load())
	one("bq_send_overflows_total", "counter", "Messages to other servers dropped because the peer's send queue was full.", float64(r.Overflows.Load()))
	one("bq_overflow_repairs_total", "counter", "Resynchronisations with a server after its send queue overflowed.", float64(r.Repairs.Load()))
	writeHistogram(&b, "bq_fsync_seconds", "Durable commit (write and fsync) latency.", lbl, r.Fsync)
	writeHistogram(&b, "bq_commit_records", "Records per durable commit (group commit size).", lbl, r.Batches)
	_, err := io.WriteString(w, b.String())
	return err
}

func writeHistogram(b *strings.Builder, name, help, lbl string, h *Histogram) {
	fmt.Fprintf(b, "# HELP %s %s\n# TYPE %s histogram\n", name, help, name)
	var cum uint64
	for i, bound := range h.bounds {
		cum += h.counts[i].Load()
		fmt.Fprintf(b, "%s_bucket{%s,le=%q} %d\n", name, lbl, num(bound), cum)
	}
	fmt.Fprintf(b, "%s_bucket{%s,le=\"+Inf\"} %d\n", name, lbl, h.count.Load())
	fmt.Fprintf(b, "%s_sum{%s} %s\n", name, lbl, num(float64(h.sumNano.Load())/1e9))
	fmt.Fprintf(b, "%s_count{%s} %d\n", name, lbl, h.count.Load())
}

func num(v float64) string {
	if v == math.Trunc(v) && math.Abs(v) < 1e15 {
		return fmt.Sprintf("%d", int64(v))
	}
	return fmt.Sprintf("%g", v)
}
