package server

import (
	"context"
	"fmt"
	"io"
	"log"
	"log/slog"
	"strings"
	"sync/atomic"

	"github.com/hashicorp/go-hclog"
)

// hclogAdapter routes Raft's hclog output to a *slog.Logger.
type hclogAdapter struct {
	log     *slog.Logger
	name    string
	implied []any
	level   *atomic.Int32
}

var _ hclog.Logger = (*hclogAdapter)(nil)

// newHCLogger returns an hclog.Logger that writes to l. Raft's Info output
// (elections, state changes) is kept; its Debug and Trace output is
// dropped unless l is enabled at slog.LevelDebug.
func newHCLogger(l *slog.Logger) hclog.Logger {
	lv := &atomic.Int32{}
	lv.Store(int32(hclog.Info))
	if l.Enabled(context.Background(), slog.LevelDebug) {
		lv.Store(int32(hclog.Debug))
	}
	return &hclogAdapter{log: l, level: lv}
}

func (a *hclogAdapter) Log(level hclog.Level, msg string, args ...any) {
	if level == hclog.Off || level < hclog.Level(a.level.Load()) {
		return
	}
	var sl slog.Level
	switch {
	case level <= hclog.Debug:
		sl = slog.LevelDebug
	case level == hclog.Info:
		sl = slog.LevelInfo
	case level == hclog.Warn:
		sl = slog.LevelWarn
	default:
		sl = slog.LevelError
	}
	all := make([]any, 0, len(a.implied)+len(args)+2)
	if a.name != "" {
		all = append(all, "logger", a.name)
	}
	all = append(all, a.implied...)
	all = append(all, normalizeArgs(args)...)
	a.log.Log(context.Background(), sl, msg, all...)
}

// normalizeArgs turns hclog's key/value pairs into slog's, stringifying
// keys and values slog would not render well.
func normalizeArgs(args []any) []any {
	out := make([]any, 0, len(args))
	for i := 0; i < len(args); i += 2 {
		key := fmt.Sprint(args[i])
		if i+1 >= len(args) {
			out = append(out, "extra", key)
			break
		}
		v := args[i+1]
		switch x := v.(type) {
		case error:
			v = x.Error()
		case fmt.Stringer:
			v = x.String()
		}
		out = append(out, key, v)
	}
	return out
}

func (a *hclogAdapter) Trace(msg string, args ...any) { a.Log(hclog.Trace, msg, args...) }
func (a *hclogAdapter) Debug(msg string, args ...any) { a.Log(hclog.Debug, msg, args...) }
func (a *hclogAdapter) Info(msg string, args ...any)  { a.Log(hclog.Info, msg, args...) }
func (a *hclogAdapter) Warn(msg string, args ...any)  { a.Log(hclog.Warn, msg, args...) }
func (a *hclogAdapter) Error(msg string, args ...any) { a.Log(hclog.Error, msg, args...) }

func (a *hclogAdapter) IsTrace() bool { return hclog.Level(a.level.Load()) <= hclog.Trace }
func (a *hclogAdapter) IsDebug() bool { return hclog.Level(a.level.Load()) <= hclog.Debug }
func (a *hclogAdapter) IsInfo() bool  { return hclog.Level(a.level.Load()) <= hclog.Info }
func (a *hclogAdapter) IsWarn() bool  { return hclog.Level(a.level.Load()) <= hclog.Warn }
func (a *hclogAdapter) IsError() bool { return hclog.Level(a.level.Load()) <= hclog.Error }

func (a *hclogAdapter) ImpliedArgs() []any { return a.implied }

func (a *hclogAdapter) With(args ...any) hclog.Logger {
	c := *a
	c.implied = append(append([]any(nil), a.implied...), normalizeArgs(args)...)
	return &c
}

func (a *hclogAdapter) Name() string { return a.name }

func (a *hclogAdapter) Named(name string) hclog.Logger {
	c := *a
	if c.name != "" {
		c.name += "." + name
	} else {
		c.name = name
	}
	return &c
}

func (a *hclogAdapter) ResetNamed(name string) hclog.Logger {
	c := *a
	c.name = name
	return &c
}

func (a *hclogAdapter) SetLevel(level hclog.Level) { a.level.Store(int32(level)) }
func (a *hclogAdapter) GetLevel() hclog.Level      { return hclog.Level(a.level.Load()) }

func (a *hclogAdapter) StandardLogger(opts *hclog.StandardLoggerOptions) *log.Logger {
	return log.New(a.StandardWriter(opts), "", 0)
}

func (a *hclogAdapter) StandardWriter(*hclog.StandardLoggerOptions) io.Writer {
	return writerFunc(func(p []byte) (int, error) {
		a.Info(strings.TrimRight(string(p), "\n"))
		return len(p), nil
	})
}

// writerFunc adapts a function to io.Writer.
type writerFunc func(p []byte) (int, error)

func (f writerFunc) Write(p []byte) (int, error) { return f(p) }
