package metrics

import (
	"bytes"
	"context"
	"crypto/x509"
	"log/slog"
	"net/http/httptest"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus/testutil"
	"github.com/prometheus/common/expfmt"
	"github.com/prometheus/common/model"
	"github.com/stretchr/testify/require"
)

// The endpoint serves what the loop published and what the runtime counted,
// every series labelled with its server, in a form the Prometheus text parser
// reads back and the client library's linter finds nothing to say about.
func TestMetricsEndpoint(t *testing.T) {
	r := NewRegistry("s1")
	r.Publish(Snapshot{Incarnation: 3, Accesses: map[string]uint64{"ticket": 5, "doorway": 7}, Resets: 2, Locks: 1, Members: 4, MaxMembers: 4})
	r.Fsync.Observe((300 * time.Microsecond).Seconds())
	r.Fsync.Observe((2 * time.Millisecond).Seconds())
	r.Batches.Observe(8)
	r.FromClients.Messages.Inc()
	r.FromClients.Bytes.Add(120)

	rec := httptest.NewRecorder()
	r.Handler().ServeHTTP(rec, httptest.NewRequest("GET", "/metrics", nil))
	require.Equal(t, 200, rec.Code)
	body := rec.Body.String()
	for _, want := range []string{
		`bq_accesses_total{kind="doorway",server="s1"} 7`,
		`bq_accesses_total{kind="ticket",server="s1"} 5`,
		`bq_resets_total{server="s1"} 2`,
		`bq_server_incarnation{server="s1"} 3`,
		`bq_active_set_members{server="s1"} 4`,
		`bq_fsync_seconds_bucket{server="s1",le="0.0005"} 1`,
		`bq_fsync_seconds_bucket{server="s1",le="0.0025"} 2`,
		`bq_fsync_seconds_count{server="s1"} 2`,
		"# TYPE bq_fsync_seconds histogram",
		`bq_commit_records_bucket{server="s1",le="4"} 0`,
		`bq_commit_records_bucket{server="s1",le="8"} 1`,
		`bq_commit_records_sum{server="s1"} 8`,
		`bq_messages_in_total{from="client",server="s1"} 1`,
		`bq_bytes_in_total{from="client",server="s1"} 120`,
		"# TYPE go_goroutines gauge",
		"# TYPE process_cpu_seconds_total counter",
	} {
		require.Contains(t, body, want)
	}
	p := expfmt.NewTextParser(model.UTF8Validation)
	families, err := p.TextToMetricFamilies(strings.NewReader(body))
	require.NoError(t, err, "the exposition parses")
	require.Contains(t, families, "bq_fsync_seconds")

	problems, err := testutil.GatherAndLint(r.Gatherer())
	require.NoError(t, err)
	for _, p := range problems {
		if strings.HasPrefix(p.Metric, "bq_") {
			t.Errorf("%s: %s", p.Metric, p.Text)
		}
	}
}

// The runtime counts every message: that must stay an atomic add or two.
func BenchmarkCountMessage(b *testing.B) {
	r := NewRegistry("s0")
	for b.Loop() {
		r.FromClients.Messages.Inc()
		r.FromClients.Bytes.Add(412)
	}
}

// The expiry of the certificates a server depends on is a gauge of Unix
// seconds, one series per certificate.
func TestCertificateExpiryGauge(t *testing.T) {
	r := NewRegistry("s2")
	ca := &x509.Certificate{NotAfter: time.Unix(2_000_000_000, 0)}
	own := &x509.Certificate{NotAfter: time.Unix(1_900_000_000, 0)}
	r.SetCertificateExpiry(ServerCertificates(ca, own, nil))

	rec := httptest.NewRecorder()
	r.Handler().ServeHTTP(rec, httptest.NewRequest("GET", "/metrics", nil))
	body := rec.Body.String()
	for _, want := range []string{
		"# TYPE bq_certificate_expiry_timestamp_seconds gauge",
		`bq_certificate_expiry_timestamp_seconds{certificate="cluster_ca",server="s2"} 2e+09`,
		`bq_certificate_expiry_timestamp_seconds{certificate="server",server="s2"} 1.9e+09`,
	} {
		require.Contains(t, body, want)
	}
	require.Equal(t, 2, testutil.CollectAndCount(r.expiry))
	require.InDelta(t, 2e9, testutil.ToFloat64(r.expiry.WithLabelValues(CertClusterCA)), 0)
	problems, err := testutil.GatherAndLint(r.Gatherer(), "bq_certificate_expiry_timestamp_seconds")
	require.NoError(t, err)
	require.Empty(t, problems)
}

// Both sides of the 30-day line, and past it: the clock is the caller's.
func TestExpiryWarnings(t *testing.T) {
	now := time.Date(2030, 6, 1, 12, 0, 0, 0, time.UTC)
	day := 24 * time.Hour
	cert := func(label string, left time.Duration) Certificate {
		return Certificate{Label: label, What: "cert " + label, NotAfter: now.Add(left)}
	}
	require.Empty(t, ExpiryWarnings(now, []Certificate{cert(CertServer, 31*day), cert(CertClusterCA, 3650*day)}), "31 days ahead: no warning")
	require.Empty(t, ExpiryWarnings(now, []Certificate{cert(CertServer, 30*day)}), "exactly 30 days ahead: not yet")
	require.Empty(t, ExpiryWarnings(now, nil))

	ws := ExpiryWarnings(now, []Certificate{cert(CertServer, 29*day), cert(CertClusterCA, 40*day)})
	require.Len(t, ws, 1, "29 days ahead: a warning; 40 days: none")
	w := ws[0]
	require.Equal(t, CertServer, w.Label)
	require.False(t, w.Expired)
	require.Equal(t, 29, w.DaysLeft)
	require.Equal(t, "cert server expires in 29 days, on 2030-06-30T12:00:00Z", w.Msg)
	require.Contains(t, w.Todo, "bqserver server replace")
	require.Contains(t, w.Todo, "--host H --port P")

	ws = ExpiryWarnings(now, []Certificate{cert(CertServer, 29*day+23*time.Hour), cert(CertClusterCA, time.Hour)})
	require.Len(t, ws, 2)
	require.Equal(t, 29, ws[0].DaysLeft, "whole days left")
	require.Equal(t, "cert cluster_ca expires within a day, on 2030-06-01T13:00:00Z", ws[1].Msg)
	require.Contains(t, ws[1].Todo, "bqserver ca rotate", "the CA is not renewed like a member's certificate")

	for _, left := range []time.Duration{0, -time.Second, -3 * day} {
		ws = ExpiryWarnings(now, []Certificate{cert(CertServer, left)})
		require.Len(t, ws, 1, "expired %v ago: a warning", -left)
		require.True(t, ws[0].Expired)
		require.LessOrEqual(t, ws[0].DaysLeft, 0)
		require.Contains(t, ws[0].Msg, "cert server expired on ")
	}
}

// The server logs its warnings at Warn when it starts and at each daily
// tick, and stops when its context ends.
func TestWarnExpiryLogsAtStartAndEachTick(t *testing.T) {
	var buf syncBuffer
	log := slog.New(slog.NewTextHandler(&buf, nil))
	start := time.Date(2030, 6, 1, 0, 0, 0, 0, time.UTC)
	certs := []Certificate{
		{Label: CertServer, What: "this server's TLS certificate", NotAfter: start.Add(32 * 24 * time.Hour)},
		{Label: CertClusterCA, What: "the cluster CA", NotAfter: start.Add(10 * 24 * time.Hour)},
	}
	tick := make(chan time.Time)
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan struct{})
	go func() {
		defer close(done)
		warnExpiry(ctx, log, func() []Certificate { return certs }, start, tick)
	}()
	day := 24 * time.Hour
	tick <- start.Add(day)                  // 31 days left: still quiet
	tick <- start.Add(2 * day)              // 30 days left: still quiet
	tick <- start.Add(3*day + 12*time.Hour) // 28.5 days left: warns
	cancel()
	<-done
	out := buf.String()
	require.Equal(t, 5, strings.Count(out, "level=WARN"), out)
	require.Equal(t, 4, strings.Count(out, "certificate=cluster_ca"), "at start and at each of 3 ticks:\n%s", out)
	require.Contains(t, out, `msg="the cluster CA expires in 10 days, on 2030-06-11T00:00:00Z"`, "the one at start")
	require.Equal(t, 1, strings.Count(out, "certificate=server"), "once it is within 30 days:\n%s", out)
	require.Contains(t, out, `msg="this server's TLS certificate expires in 28 days, on 2030-07-03T00:00:00Z"`)
	require.Contains(t, out, "days_left=28")
	require.Contains(t, out, "bqserver server replace")
}

// syncBuffer is a bytes.Buffer safe for the logging goroutine and the test.
type syncBuffer struct {
	mu sync.Mutex
	b  bytes.Buffer
}

func (s *syncBuffer) Write(p []byte) (int, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.b.Write(p)
}
func (s *syncBuffer) String() string { s.mu.Lock(); defer s.mu.Unlock(); return s.b.String() }

// A member's certificate expires with its issuer: after a CA rotation
// retired the CA that issued it, the member's line says so when that CA
// ends first, and the remedy is a replace (a certificate of the CA in
// force), not another rotation; the CA in force is the cluster CA line.
// The daily warning reads the certificates afresh at each look, so a
// rotation while the server runs changes what it warns about.
func TestRetiredIssuerExpiresTheMember(t *testing.T) {
	now := time.Date(2030, 6, 1, 0, 0, 0, 0, time.UTC)
	day := 24 * time.Hour
	oldCA := &x509.Certificate{NotAfter: now.Add(10 * day)}
	newCA := &x509.Certificate{NotAfter: now.Add(3650 * day)}
	leaf := &x509.Certificate{NotAfter: now.Add(300 * day)}

	before := ServerCertificates(oldCA, leaf, nil)
	ws := ExpiryWarnings(now, before)
	require.Len(t, ws, 1)
	require.Equal(t, CertClusterCA, ws[0].Label)
	require.Contains(t, ws[0].Todo, "bqserver ca rotate")

	after := ServerCertificates(newCA, leaf, oldCA)
	ws = ExpiryWarnings(now, after)
	require.Len(t, ws, 1, "the CA in force is far off; the member is not")
	require.Equal(t, CertServer, ws[0].Label)
	require.Equal(t, "the retired cluster CA that issued this server's TLS certificate expires in 10 days, on 2030-06-11T00:00:00Z", ws[0].Msg)
	require.Contains(t, ws[0].Todo, "bqserver server replace")

	require.Equal(t, leaf.NotAfter, MemberCertificate("server 3's", leaf, &x509.Certificate{NotAfter: now.Add(400 * day)}).NotAfter,
		"a retired issuer that outlives the certificate changes nothing")
	require.Equal(t, "server 3's TLS certificate", MemberCertificate("server 3's", leaf, nil).What)

	var buf syncBuffer
	log := slog.New(slog.NewTextHandler(&buf, nil))
	// Each look gets the certificates of its turn: at start and at the first
	// tick the old CA is in force, at the second the CA has rotated. The
	// looks are counted rather than switched from the test's goroutine, which
	// would race with the look the first tick starts.
	looks := [][]Certificate{before, before, after}
	var look int
	certs := func() []Certificate {
		i := min(look, len(looks)-1)
		look++
		return looks[i]
	}
	tick := make(chan time.Time)
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan struct{})
	go func() {
		defer close(done)
		warnExpiry(ctx, log, certs, now, tick)
	}()
	tick <- now.Add(day)
	tick <- now.Add(2 * day) // the CA rotated in between
	cancel()
	<-done
	out := buf.String()
	require.Equal(t, 2, strings.Count(out, "certificate=cluster_ca"), "before the rotation:\n%s", out)
	require.Equal(t, 1, strings.Count(out, "certificate=server"), "after it:\n%s", out)
	require.Contains(t, out, "the retired cluster CA that issued this server's TLS certificate expires in 8 days")
}
