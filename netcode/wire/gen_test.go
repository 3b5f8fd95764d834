package wire

import (
	"bytes"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strings"
	"testing"

	"github.com/anoptic/broadside/netcode/wire/fb"
	flatbuffers "github.com/google/flatbuffers/go"
)

// flatcVersion is the flatc whose output is committed (Debian 12
// flatbuffers-compiler). Another version generates different code.
const flatcVersion = "2.0.8"

var schemas = []string{"cmdlog.fbs", "envelope.fbs", "command.fbs", "session.fbs"}

// needFlatc returns the path of flatc, or skips the test when it is missing
// or of another version. Under CI (CI set) it fails instead: `make test`
// installs flatc, so a missing one there is a broken setup, not a reason to
// skip the check.
func needFlatc(t *testing.T) string {
	t.Helper()
	skip := t.Skipf
	if os.Getenv("CI") != "" {
		skip = t.Fatalf
	}
	path, err := exec.LookPath("flatc")
	if err != nil {
		skip("flatc not found (apt-get install flatbuffers-compiler): cannot check generated code")
		return ""
	}
	out, err := exec.Command(path, "--version").CombinedOutput()
	if err != nil {
		skip("flatc --version: %v: %s", err, out)
		return ""
	}
	if got := strings.TrimSpace(string(out)); got != "flatc version "+flatcVersion {
		skip("%s is %q; the committed code comes from flatc %s", path, got, flatcVersion)
		return ""
	}
	return path
}

// TestGeneratedCodeFresh regenerates the Go code from the schemas and fails
// if it differs from the committed fb package (run `go generate
// ./netcode/wire` and commit).
func TestGeneratedCodeFresh(t *testing.T) {
	flatc := needFlatc(t)
	tmp := t.TempDir()
	args := append([]string{"--go", "-o", tmp}, schemas...)
	if out, err := exec.Command(flatc, args...).CombinedOutput(); err != nil {
		t.Fatalf("flatc %v: %v\n%s", args, err, out)
	}
	fresh := goFiles(t, filepath.Join(tmp, "fb"))
	committed := goFiles(t, "fb")
	delete(committed, "doc.go") // hand-written package documentation
	for name, want := range fresh {
		got, ok := committed[name]
		switch {
		case !ok:
			t.Errorf("fb/%s missing: run go generate ./netcode/wire", name)
		case !bytes.Equal(got, want):
			t.Errorf("fb/%s is stale: run go generate ./netcode/wire", name)
		}
	}
	for name := range committed {
		if _, ok := fresh[name]; !ok {
			t.Errorf("fb/%s is not generated from the schemas any more: delete it", name)
		}
	}
}

func goFiles(t *testing.T, dir string) map[string][]byte {
	t.Helper()
	names, err := filepath.Glob(filepath.Join(dir, "*.go"))
	if err != nil {
		t.Fatal(err)
	}
	files := map[string][]byte{}
	for _, n := range names {
		b, err := os.ReadFile(n)
		if err != nil {
			t.Fatal(err)
		}
		files[filepath.Base(n)] = b
	}
	if len(files) == 0 {
		t.Fatalf("no Go files in %s", dir)
	}
	return files
}

// TestFileIdentifiers checks the identifier constants against the schemas.
func TestFileIdentifiers(t *testing.T) {
	re := regexp.MustCompile(`(?m)^file_identifier "(....)";`)
	want := map[string]string{"cmdlog.fbs": FrameIdentifier, "envelope.fbs": EnvelopeIdentifier, "command.fbs": GameCommandIdentifier, "session.fbs": SessionIdentifier}
	for _, s := range schemas {
		b, err := os.ReadFile(s)
		if err != nil {
			t.Fatal(err)
		}
		m := re.FindSubmatch(b)
		if m == nil || string(m[1]) != want[s] {
			t.Errorf("%s: file_identifier %q, constant %q", s, m, want[s])
		}
	}
}

// TestBodyVerifiers checks that every Body union type has a name and a
// verifier: a Frame with an empty body table of each type verifies, and one
// of the next type does not. (cmdlog/codec tests that Body values equal
// msg.Kind values: package wire does not know about cmdlog, not even in
// tests.)
func TestBodyVerifiers(t *testing.T) {
	if len(bodyNames) != len(fb.EnumNamesBody) {
		t.Fatalf("%d names for %d Body types", len(bodyNames), len(fb.EnumNamesBody))
	}
	for typ := 1; typ <= len(bodyNames); typ++ {
		b := flatbuffers.NewBuilder(0)
		b.StartObject(0)
		body := b.EndObject()
		fb.FrameStart(b)
		fb.FrameAddBody(b, body)
		fb.FrameAddBodyType(b, fb.Body(typ))
		b.FinishWithFileIdentifier(fb.FrameEnd(b), []byte(FrameIdentifier))
		err := VerifyFrame(b.FinishedBytes())
		if typ < len(bodyNames) {
			if err != nil || bodyNames[typ] != fb.EnumNamesBody[fb.Body(typ)] {
				t.Errorf("Body %d (%s): name %q, %v", typ, fb.EnumNamesBody[fb.Body(typ)], bodyNames[typ], err)
			}
		} else if err == nil || !strings.Contains(err.Error(), "unknown union type") {
			t.Errorf("Body %d: got %v", typ, err)
		}
	}
}
