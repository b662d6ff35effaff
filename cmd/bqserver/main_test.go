package main

import (
	"bytes"
	"strings"
	"testing"

	"github.com/stretchr/testify/require"
)

// Each command's --help lists the exit codes that command can end with,
// and no other's (issue 55: 'dev --help' listed the exit 5 of 'server
// add' and 'replace', which dev never returns).
func TestEachHelpListsItsOwnExitCodes(t *testing.T) {
	help := func(args ...string) string {
		var out, errb bytes.Buffer
		require.Equal(t, 0, run(append(args, "--help"), &out, &errb), errb.String())
		i := strings.Index(out.String(), "Exit codes:")
		require.GreaterOrEqual(t, i, 0, "%v --help lists its exit codes:\n%s", args, out.String())
		return out.String()[i:]
	}
	for _, args := range [][]string{{"dev"}, {"init"}, {"run"}, {"settings"}, {"client", "add"}, {"client", "list"}, {"client", "renew"}, {"version"}} {
		codes := help(args...)
		require.Contains(t, codes, "  2  usage", args)
		require.NotContains(t, codes, "  5  ", "%v never exits 5", args)
	}
	for _, args := range [][]string{{"server", "add"}, {"server", "remove"}, {"server", "replace"}, {"server", "push"}, {"ca", "rotate"}, {"ca", "rotate-clients"}, {"ca", "retire-clients"}, {"ca", "rotate-operator"}} {
		require.Contains(t, help(args...), "  5  too few servers answered: fewer than must endorse the change", args)
	}
	for _, args := range [][]string{{"server", "list"}, {"status"}} {
		require.Contains(t, help(args...), "  5  fewer than a quorum of the members answered", args)
	}
	require.Contains(t, help("client", "revoke"), "  5  fewer than a quorum of the servers acknowledged the revocation")
	require.Contains(t, help("run"), "or in the settings file")
	require.Contains(t, help(), "  5  too few servers answered ('server', 'ca', 'client revoke' and 'status'")
}
