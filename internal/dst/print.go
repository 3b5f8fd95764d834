package dst

import (
	"fmt"
	"os"
)

// printf writes a summary line to standard output (seen in `make test`).
func printf(format string, args ...any) { fmt.Fprintf(os.Stdout, format, args...) }
