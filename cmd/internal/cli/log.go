package cli

import (
	"fmt"
	"io"
	"log/slog"
	"strings"

	"github.com/spf13/pflag"
)

// LogFlags are --log-level and --log-format.
type LogFlags struct{ Level, Format string }

// Add registers the flags on fs.
func (l *LogFlags) Add(fs *pflag.FlagSet, level string) {
	fs.StringVar(&l.Level, "log-level", level, "log level: debug, info, warn or error")
	fs.StringVar(&l.Format, "log-format", "text", "log format: text or json")
}

// Logger builds the logger the flags ask for, writing to w.
func (l *LogFlags) Logger(w io.Writer) (*slog.Logger, error) {
	var level slog.Level
	if err := level.UnmarshalText([]byte(l.Level)); err != nil {
		return nil, Usagef("bad --log-level %q: want debug, info, warn or error", l.Level)
	}
	opts := &slog.HandlerOptions{Level: level}
	switch strings.ToLower(l.Format) {
	case "text":
		return slog.New(slog.NewTextHandler(w, opts)), nil
	case "json":
		return slog.New(slog.NewJSONHandler(w, opts)), nil
	}
	return nil, Usagef("bad --log-format %q: want text or json", l.Format)
}

// UsageError is a mistake on the command line: the command exits 2.
type UsageError struct{ Err error }

func (e *UsageError) Error() string { return e.Err.Error() }
func (e *UsageError) Unwrap() error { return e.Err }

// Usagef makes a UsageError.
func Usagef(format string, args ...any) error {
	return &UsageError{Err: fmt.Errorf(format, args...)}
}
