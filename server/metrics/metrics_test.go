package metrics

import (
	"net/http/httptest"
	"strings"
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
