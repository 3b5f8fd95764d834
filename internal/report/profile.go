package report

import (
	"bytes"
	"fmt"
	"os"
	"runtime/pprof"
	"time"

	"github.com/google/pprof/profile"
)

// CPUProfile records this process's CPU profile from StartCPUProfile to
// Stop (one at a time per process, as runtime/pprof allows).
type CPUProfile struct{ buf bytes.Buffer }

// StartCPUProfile starts profiling this process.
func StartCPUProfile() (*CPUProfile, error) {
	p := &CPUProfile{}
	if err := pprof.StartCPUProfile(&p.buf); err != nil {
		return nil, fmt.Errorf("cpu profile: %w", err)
	}
	return p, nil
}

// CPUProfileToFile starts profiling this process into a new file at path
// (for go tool pprof); stop ends the profile and closes the file.
func CPUProfileToFile(path string) (stop func(), err error) {
	f, err := os.Create(path)
	if err != nil {
		return nil, fmt.Errorf("cpu profile: %w", err)
	}
	if err := pprof.StartCPUProfile(f); err != nil {
		f.Close()
		return nil, fmt.Errorf("cpu profile: %w", err)
	}
	return func() { pprof.StopCPUProfile(); f.Close() }, nil
}

// Stop ends the profile and returns the CPU time of its samples by the
// value of the goroutine label key ("" for samples without it: the
// runtime's own goroutines, such as the garbage collector's workers, and
// goroutines nobody labelled).
func (p *CPUProfile) Stop(key string) (map[string]time.Duration, error) {
	pprof.StopCPUProfile()
	return CPUByLabel(p.buf.Bytes(), key)
}

// Bytes returns the profile (after Stop), in pprof's format.
func (p *CPUProfile) Bytes() []byte { return p.buf.Bytes() }

// CPUByLabel sums a CPU profile's samples by the value of the label key.
func CPUByLabel(data []byte, key string) (map[string]time.Duration, error) {
	prof, err := profile.ParseData(data)
	if err != nil {
		return nil, fmt.Errorf("cpu profile: %w", err)
	}
	// The CPU value is the sample type of unit nanoseconds ("cpu").
	vi := -1
	for i, st := range prof.SampleType {
		if st.Unit == "nanoseconds" {
			vi = i
		}
	}
	if vi < 0 {
		return nil, fmt.Errorf("cpu profile: no sample type in nanoseconds")
	}
	out := map[string]time.Duration{}
	for _, s := range prof.Sample {
		v := ""
		if vs := s.Label[key]; len(vs) > 0 {
			v = vs[0]
		}
		out[v] += time.Duration(s.Value[vi])
	}
	return out, nil
}
