// Command bqclient takes, releases and inspects bq locks.
//
//	bqclient [--cluster FILE] [--identity FILE] COMMAND ...
//
// Exit codes: 0 ok, 1 error, 2 usage, 3 timeout (or busy with --try),
// 4 lock lost; with a command to run under the lock, that command's code.
package main

import (
	"errors"
	"flag"
	"fmt"
	"io"
	"os"
	"path/filepath"
)

// Exit codes.
const (
	exitOK      = 0
	exitError   = 1
	exitUsage   = 2
	exitTimeout = 3
	exitLost    = 4
)

const usage = `bqclient: take, release and inspect bq locks

Usage:
  bqclient [--cluster FILE] [--identity FILE] COMMAND [ARGS]

Commands:
  keygen [--out FILE] [--scheme S]     make a client identity (a signing key)
  lock NAME [--timeout D] [--ttl D] [--try] [--detach] [-- CMD ARGS...]
                                       take lock NAME; with CMD, run it while holding the lock
                                       (BQ_LOCK_NAME and BQ_LOCK_TOKEN in its environment)
  unlock NAME                          release this identity's holding or attempt on NAME
  status [NAME] [--json]               servers, faults tolerated, and the lock's holder and queue

Global flags (also from the environment):
  --cluster FILE    the cluster file (BQ_CLUSTER; default ./cluster.yaml)
  --identity FILE   this client's key (BQ_IDENTITY; default ~/.config/bq/identity.key,
                    created on first use)

Exit codes: 0 ok, 1 error, 2 usage, 3 timeout or busy (--try), 4 lock lost; with CMD, CMD's code.
`

func main() { os.Exit(run(os.Args[1:], os.Stdin, os.Stdout, os.Stderr)) }

// globals are the flags every command shares.
type globals struct {
	cluster, identity string
	identityDefault   bool
}

func run(args []string, stdin io.Reader, stdout, stderr io.Writer) int {
	fs := flag.NewFlagSet("bqclient", flag.ContinueOnError)
	fs.SetOutput(stderr)
	fs.Usage = func() { fmt.Fprint(stderr, usage) }
	var g globals
	fs.StringVar(&g.cluster, "cluster", envOr("BQ_CLUSTER", "cluster.yaml"), "cluster file")
	fs.StringVar(&g.identity, "identity", os.Getenv("BQ_IDENTITY"), "identity file")
	if err := fs.Parse(args); err != nil {
		if errors.Is(err, flag.ErrHelp) {
			return exitOK
		}
		return exitUsage
	}
	if g.identity == "" {
		g.identity, g.identityDefault = defaultIdentity(), true
	}
	rest := fs.Args()
	if len(rest) == 0 {
		fmt.Fprint(stderr, usage)
		return exitUsage
	}
	switch rest[0] {
	case "keygen":
		return cmdKeygen(g, rest[1:], stdout, stderr)
	case "lock":
		return cmdLock(g, rest[1:], stdin, stdout, stderr)
	case "unlock":
		return cmdUnlock(g, rest[1:], stdout, stderr)
	case "status":
		return cmdStatus(g, rest[1:], stdout, stderr)
	case "help", "-h", "--help":
		fmt.Fprint(stdout, usage)
		return exitOK
	}
	fmt.Fprintf(stderr, "bqclient: unknown command %q\n\n%s", rest[0], usage)
	return exitUsage
}

func envOr(key, def string) string {
	if v := os.Getenv(key); v != "" {
		return v
	}
	return def
}

func defaultIdentity() string {
	dir, err := os.UserConfigDir()
	if err != nil {
		return "bq-identity.key"
	}
	return filepath.Join(dir, "bq", "identity.key")
}

// interspersed parses flags that may come after positional arguments
// ("lock NAME --try"), stopping at "--".
func interspersed(fs *flag.FlagSet, args []string) (positional, after []string, err error) {
	for {
		// Split at "--" first: flag.Parse would swallow it.
		var after []string
		for i, a := range args {
			if a == "--" {
				args, after = args[:i], args[i+1:]
				break
			}
		}
		if err := fs.Parse(args); err != nil {
			return nil, nil, err
		}
		rest := fs.Args()
		if len(rest) == 0 {
			return positional, after, nil
		}
		positional = append(positional, rest[0])
		args = rest[1:]
		if after != nil {
			args = append(append(args, "--"), after...)
		}
	}
}
