package metrics

import (
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
)

func TestRender(t *testing.T) {
	r := NewRegistry()
	r.Publish(Snapshot{Server: "s1", Incarnation: 3, Accesses: map[string]uint64{"ticket": 5, "doorway": 7}, Resets: 2, Locks: 1, Members: 4, MaxMembers: 4})
	r.Fsync.ObserveDuration(300 * time.Microsecond)
	r.Fsync.ObserveDuration(2 * time.Millisecond)
	r.Batches.Observe(8)
	var b strings.Builder
	require.NoError(t, r.Write(&b))
	out := b.String()
	for _, want := range []string{
		`bq_accesses_total{server="s1",kind="doorway"} 7`,
		`bq_accesses_total{server="s1",kind="ticket"} 5`,
		`bq_resets_total{server="s1"} 2`,
		`bq_active_set_members{server="s1"} 4`,
		`bq_fsync_seconds_bucket{server="s1",le="0.0005"} 1`,
		`bq_fsync_seconds_bucket{server="s1",le="0.0025"} 2`,
		`bq_fsync_seconds_count{server="s1"} 2`,
		"# TYPE bq_fsync_seconds histogram",
		`bq_commit_records_bucket{server="s1",le="4"} 0`,
		`bq_commit_records_bucket{server="s1",le="8"} 1`,
		`bq_commit_records_sum{server="s1"} 8`,
	} {
		require.Contains(t, out, want)
	}
	// Every line is a comment or "name{labels} value".
	for _, line := range strings.Split(strings.TrimSpace(out), "\n") {
		if strings.HasPrefix(line, "#") {
			continue
		}
		require.Regexp(t, `^bq_[a-z_]+\{[^}]*\} [0-9.e+-]+$`, line)
	}
}
