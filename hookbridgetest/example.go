package hookbridgetest

import (
	"context"
	"fmt"
	"io"
	"os"
	"runtime"
	"sync"
	"testing"
)

// Example runs fn with a [testing.TB] for the body of an Example function,
// which gets no *testing.T of its own, so that an Example can use the kit
// ([Postgres], [NATS], [Database.Apply], …) and show what it printed:
//
//	func ExampleHandler() {
//		hookbridgetest.Example(func(t testing.TB) {
//			db := hookbridgetest.Postgres(t, mySet)
//			…
//			fmt.Println(…)
//		})
//		// Output: …
//	}
//
// A failure (t.Error, t.Fatal, a failing kit helper) is printed to
// standard output as a line starting with "FAIL: ", so the Example's
// output no longer matches and `go test` reports it with the message;
// t.Fatal and t.Skip stop fn, as in a test. When fn returns or stops,
// t.Context is cancelled and the cleanups run, last registered first (the
// databases are dropped, the servers stopped) before Example returns.
// Logs (t.Log) go to standard error, not into the checked output.
func Example(fn func(t testing.TB)) {
	ctx, cancel := context.WithCancel(context.Background())
	t := &exampleTB{ctx: ctx}
	var wg sync.WaitGroup
	wg.Go(func() { fn(t) }) // Fatal ends this goroutine (runtime.Goexit), as it ends a test's
	wg.Wait()
	cancel()
	t.runCleanups()
}

// exampleTB is the testing.TB of [Example]. The embedded interface is
// never set: it only supplies testing.TB's unexported method, and every
// exported one is implemented below.
type exampleTB struct {
	testing.TB
	ctx context.Context

	mu       sync.Mutex
	cleanups []func()
	failed   bool
	skipped  bool
}

func (t *exampleTB) Name() string             { return "Example" }
func (t *exampleTB) Helper()                  {}
func (t *exampleTB) Context() context.Context { return t.ctx }
func (t *exampleTB) Attr(key, value string)   {}
func (t *exampleTB) Output() io.Writer        { return os.Stderr }

func (t *exampleTB) Log(args ...any)                 { fmt.Fprintln(os.Stderr, args...) }
func (t *exampleTB) Logf(format string, args ...any) { fmt.Fprintf(os.Stderr, format+"\n", args...) }

func (t *exampleTB) Fail() {
	t.mu.Lock()
	defer t.mu.Unlock()
	t.failed = true
}

func (t *exampleTB) Failed() bool {
	t.mu.Lock()
	defer t.mu.Unlock()
	return t.failed
}

func (t *exampleTB) FailNow() {
	t.Fail()
	runtime.Goexit()
}

// Error and the others print to os.Stdout as it is when they are called:
// during an Example, that is the output the Example is checked against.
func (t *exampleTB) Error(args ...any) {
	fmt.Fprint(os.Stdout, "FAIL: "+fmt.Sprintln(args...))
	t.Fail()
}

func (t *exampleTB) Errorf(format string, args ...any) {
	fmt.Fprintf(os.Stdout, "FAIL: "+format+"\n", args...)
	t.Fail()
}

func (t *exampleTB) Fatal(args ...any) {
	t.Error(args...)
	runtime.Goexit()
}

func (t *exampleTB) Fatalf(format string, args ...any) {
	t.Errorf(format, args...)
	runtime.Goexit()
}

// Skip is a failure too: the kit never skips, and an Example whose body
// did not run shows nothing it promised.
func (t *exampleTB) Skip(args ...any) {
	fmt.Fprint(os.Stdout, "SKIP: "+fmt.Sprintln(args...))
	t.SkipNow()
}

func (t *exampleTB) Skipf(format string, args ...any) {
	fmt.Fprintf(os.Stdout, "SKIP: "+format+"\n", args...)
	t.SkipNow()
}

func (t *exampleTB) SkipNow() {
	t.mu.Lock()
	t.skipped = true
	t.mu.Unlock()
	runtime.Goexit()
}

func (t *exampleTB) Skipped() bool {
	t.mu.Lock()
	defer t.mu.Unlock()
	return t.skipped
}

func (t *exampleTB) Cleanup(f func()) {
	t.mu.Lock()
	defer t.mu.Unlock()
	t.cleanups = append(t.cleanups, f)
}

// runCleanups runs the cleanups last first; one that calls t.Fatal ends
// only itself.
func (t *exampleTB) runCleanups() {
	for {
		t.mu.Lock()
		if len(t.cleanups) == 0 {
			t.mu.Unlock()
			return
		}
		f := t.cleanups[len(t.cleanups)-1]
		t.cleanups = t.cleanups[:len(t.cleanups)-1]
		t.mu.Unlock()
		var wg sync.WaitGroup
		wg.Go(f)
		wg.Wait()
	}
}

func (t *exampleTB) TempDir() string {
	dir, err := os.MkdirTemp("", "hookbridgetest-example-")
	if err != nil {
		t.Fatalf("TempDir: %v", err)
	}
	t.Cleanup(func() {
		if err := os.RemoveAll(dir); err != nil {
			t.Errorf("TempDir cleanup: %v", err)
		}
	})
	return dir
}

func (t *exampleTB) ArtifactDir() string { return t.TempDir() }

func (t *exampleTB) Setenv(key, value string) {
	prev, had := os.LookupEnv(key)
	if err := os.Setenv(key, value); err != nil {
		t.Fatalf("Setenv: %v", err)
	}
	t.Cleanup(func() {
		if had {
			_ = os.Setenv(key, prev)
		} else {
			_ = os.Unsetenv(key)
		}
	})
}

func (t *exampleTB) Chdir(dir string) {
	prev, err := os.Getwd()
	if err != nil {
		t.Fatalf("Chdir: %v", err)
	}
	if err := os.Chdir(dir); err != nil {
		t.Fatalf("Chdir: %v", err)
	}
	t.Cleanup(func() {
		if err := os.Chdir(prev); err != nil {
			t.Errorf("Chdir back: %v", err)
		}
	})
}
