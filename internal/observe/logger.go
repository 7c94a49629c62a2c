package observe

import (
	"fmt"
	"io"
	"os"

	"go.uber.org/zap"
	"go.uber.org/zap/zapcore"
)

// NewLogger builds zap: console lines in development or on a terminal, JSON
// otherwise (production, where logs are collected).
func NewLogger(env, level string, w io.Writer) (*zap.Logger, error) {
	lvl, err := zapcore.ParseLevel(level)
	if err != nil {
		return nil, fmt.Errorf("observe: log level: %w", err)
	}
	var enc zapcore.Encoder
	if env == "development" || isTerminal(w) {
		cfg := zap.NewDevelopmentEncoderConfig()
		cfg.EncodeLevel = zapcore.CapitalColorLevelEncoder
		enc = zapcore.NewConsoleEncoder(cfg)
	} else {
		cfg := zap.NewProductionEncoderConfig()
		cfg.EncodeTime = zapcore.ISO8601TimeEncoder
		enc = zapcore.NewJSONEncoder(cfg)
	}
	return zap.New(zapcore.NewCore(enc, zapcore.AddSync(w), lvl)), nil
}

func isTerminal(w io.Writer) bool {
	f, ok := w.(*os.File)
	if !ok {
		return false
	}
	st, err := f.Stat()
	return err == nil && st.Mode()&os.ModeCharDevice != 0
}

// AsynqLogger adapts zap to asynq.Logger, so asynq's own lines are structured too.
type AsynqLogger struct{ S *zap.SugaredLogger }

func (l AsynqLogger) Debug(args ...any) { l.S.Debug(args...) }
func (l AsynqLogger) Info(args ...any)  { l.S.Info(args...) }
func (l AsynqLogger) Warn(args ...any)  { l.S.Warn(args...) }
func (l AsynqLogger) Error(args ...any) { l.S.Error(args...) }
func (l AsynqLogger) Fatal(args ...any) { l.S.Fatal(args...) }
