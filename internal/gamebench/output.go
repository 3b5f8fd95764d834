package gamebench

import (
	"fmt"
	"io"
	"log/slog"

	"github.com/anoptic/broadside/internal/report"
)

// Output is what every benchmark's config holds besides its parameters
// (the table goes to the writer given to Run).
type Output struct {
	// JSONPath, if set, receives the results as JSON.
	JSONPath string
	// Logger receives the engine's warnings (nil: none).
	Logger *slog.Logger
	// Progress receives progress lines (nil: none).
	Progress io.Writer
}

// withDefaults is o with a logger and a progress writer that drop
// everything where o has none.
func (o Output) withDefaults() Output {
	if o.Logger == nil {
		o.Logger = slog.New(slog.DiscardHandler)
	}
	if o.Progress == nil {
		o.Progress = io.Discard
	}
	return o
}

// writeJSON writes v to JSONPath, if set.
func (o Output) writeJSON(v any) error {
	if o.JSONPath == "" {
		return nil
	}
	if err := report.WriteJSONFile(o.JSONPath, v); err != nil {
		return fmt.Errorf("--json: %w", err)
	}
	return nil
}
