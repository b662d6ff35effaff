package cli

import (
	"errors"
	"fmt"
	"io"

	"github.com/spf13/cobra"
)

// Exit is an error that ends a command with Code; Msg, if set, is printed
// as one line after the command's name.
type Exit struct {
	Code int
	Msg  string
}

func (e *Exit) Error() string { return e.Msg }

// Execute runs root with args and returns the exit code: 0, an Exit's code,
// or 2 for anything cobra or a UsageError reports (a mistake on the command
// line), printed with where to read more.
func Execute(root *cobra.Command, args []string, stderr io.Writer) int {
	root.SetArgs(args)
	root.SilenceErrors, root.SilenceUsage = true, true
	root.SetFlagErrorFunc(func(_ *cobra.Command, err error) error { return &UsageError{Err: err} })
	cmd, err := root.ExecuteC()
	if err == nil {
		return 0
	}
	var e *Exit
	if errors.As(err, &e) {
		if e.Msg != "" {
			fmt.Fprintf(stderr, "%s: %s\n", cmd.CommandPath(), e.Msg)
		}
		return e.Code
	}
	fmt.Fprintf(stderr, "%s: %v\nRun '%s --help' for usage.\n", cmd.CommandPath(), err, cmd.CommandPath())
	return 2
}

// NoArgs refuses positional arguments as a usage error.
func NoArgs(_ *cobra.Command, args []string) error {
	if len(args) > 0 {
		return Usagef("unexpected argument %q", args[0])
	}
	return nil
}

// Group makes cmd a command that only groups subcommands: given none it
// prints its help to standard error and exits 2, and given an unknown one
// it names that word ("unknown command") rather than a flag meant for the
// subcommand the operator mistyped.
func Group(cmd *cobra.Command) *cobra.Command {
	cmd.FParseErrWhitelist = cobra.FParseErrWhitelist{UnknownFlags: true}
	cmd.Args = cobra.ArbitraryArgs
	cmd.SuggestionsMinimumDistance = 2
	cmd.RunE = func(c *cobra.Command, args []string) error {
		if len(args) == 0 {
			c.SetOut(c.ErrOrStderr())
			_ = c.Help()
			return &Exit{Code: 2, Msg: "name one of its commands"}
		}
		msg := fmt.Sprintf("unknown command %q for %q", args[0], c.CommandPath())
		if s := c.SuggestionsFor(args[0]); len(s) > 0 {
			msg += fmt.Sprintf("; did you mean %q?", s[0])
		}
		return Usagef("%s", msg)
	}
	return cmd
}
