// Package cli holds what bqserver and bqclient share on the command line:
// the version text, the logging flags and the exit codes.
package cli

import (
	"fmt"
	"runtime"
	"runtime/debug"
	"strings"

	"github.com/bq-lock/bq/wire"
)

// Set by the linker where the build has no VCS stamp (GOFLAGS=-buildvcs=false,
// a source tarball): go build -ldflags "-X
// github.com/bq-lock/bq/cmd/internal/cli.commit=$(git rev-parse HEAD)".
var (
	version string
	commit  string
)

// Version is the text of `NAME version` and `NAME --version`: the module
// version, the commit it was built from, the Go version and the protocol
// version, one per line.
func Version(name string) string {
	module, commit, when, modified := "(devel)", commit, "", false
	if version != "" {
		module = version
	}
	if commit == "" {
		commit = "(unknown: built without VCS information)"
	}
	if info, ok := debug.ReadBuildInfo(); ok {
		if version == "" && info.Main.Version != "" {
			module = info.Main.Version
		}
		for _, s := range info.Settings {
			switch s.Key {
			case "vcs.revision":
				commit = s.Value
			case "vcs.time":
				when = s.Value
			case "vcs.modified":
				modified = s.Value == "true"
			}
		}
	}
	if len(commit) == 40 && strings.Trim(commit, "0123456789abcdef") == "" {
		commit = commit[:12] // a full hash: its first 12 digits name it
	}
	var b strings.Builder
	fmt.Fprintf(&b, "%s %s\n", name, module)
	fmt.Fprintf(&b, "commit:   %s", commit)
	if when != "" {
		fmt.Fprintf(&b, " (%s)", when)
	}
	if modified {
		b.WriteString(" with local changes")
	}
	fmt.Fprintf(&b, "\ngo:       %s %s/%s\n", runtime.Version(), runtime.GOOS, runtime.GOARCH)
	fmt.Fprintf(&b, "protocol: bq/%s\n", wire.ProtocolVersion())
	return b.String()
}
