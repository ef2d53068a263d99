package main

import (
	"bufio"
	"context"
	"fmt"
	"io"
	"net/http"
	"strings"
	"testing"
)

// TestProfilesAreServedApartOnLoopbackOnly: with -pprof-addr the runtime
// profiles answer on their own listener, named by a third stdout line, and
// never on the API's; without it there is no such listener and no line.
func TestProfilesAreServedApartOnLoopbackOnly(t *testing.T) {
	t.Parallel()
	for _, addr := range []string{"127.0.0.1:0", "localhost:0"} {
		t.Run(addr, func(t *testing.T) {
			lines, _ := runLines(t, map[string]string{"PETSTORE_PPROF_ADDR": addr}, 3)
			api := strings.TrimPrefix(lines[0], "petstore listening on ")
			profiles, ok := strings.CutPrefix(lines[2], "petstore profiles on ")
			loopback := strings.HasPrefix(profiles, "http://127.0.0.1:") || strings.HasPrefix(profiles, "http://[::1]:")
			if !ok || !loopback || !strings.HasSuffix(profiles, "/debug/pprof/") {
				t.Fatalf("third line %q, want petstore profiles on http://127.0.0.1:PORT/debug/pprof/ (or [::1])", lines[2])
			}
			for _, path := range []string{"", "goroutine?debug=1", "heap?debug=1"} {
				res, err := http.Get(profiles + path)
				if err != nil {
					t.Fatal(err)
				}
				body, _ := io.ReadAll(res.Body)
				res.Body.Close()
				if res.StatusCode != http.StatusOK || len(body) == 0 {
					t.Errorf("GET %s%s: %d, %d bytes", profiles, path, res.StatusCode, len(body))
				}
			}
			// Not the command line, which may hold a database password.
			if res, err := http.Get(profiles + "cmdline"); err != nil {
				t.Fatal(err)
			} else if res.Body.Close(); res.StatusCode == http.StatusOK {
				t.Errorf("GET %scmdline: 200, want it not served", profiles)
			}
			// Not on the API's listener, even with a key.
			res := doRequest(t, api, "GET", "/debug/pprof/", "", nil)
			wantError(t, res, http.StatusNotFound, codeNotFound)
		})
	}
	t.Run("off by default", func(t *testing.T) {
		lines, stderr := runLines(t, nil, 2)
		api := strings.TrimPrefix(lines[0], "petstore listening on ")
		wantError(t, doRequest(t, api, "GET", "/debug/pprof/", "", nil), http.StatusNotFound, codeNotFound)
		if strings.Contains(stderr.String(), "profiles") {
			t.Errorf("the log speaks of profiles without -pprof-addr:\n%s", stderr)
		}
	})
}

// runLines runs the service on a fresh SQLite file with env and returns the
// first n lines it printed on stdout, and its log.
func runLines(t *testing.T, env map[string]string, n int) ([]string, *syncBuffer) {
	t.Helper()
	all := map[string]string{"PETSTORE_ADDR": "127.0.0.1:0", "PETSTORE_DB": t.TempDir() + "/pets.db", "PETSTORE_API_KEYS": testKey}
	for k, v := range env {
		all[k] = v
	}
	ctx, cancel := context.WithCancel(context.Background())
	stdoutR, stdoutW := io.Pipe()
	stderr := &syncBuffer{}
	done := make(chan error, 1)
	go func() {
		err := run(ctx, nil, mapEnv(withSharedSecret(t, all)), strings.NewReader(""), stdoutW, stderr)
		stdoutW.CloseWithError(fmt.Errorf("run returned: %v", err))
		done <- err
	}()
	t.Cleanup(func() {
		cancel()
		<-done
	})
	r := bufio.NewReader(stdoutR)
	var lines []string
	for range n {
		line, err := r.ReadString('\n')
		if err != nil {
			t.Fatalf("stdout line %d: %v; log:\n%s", len(lines)+1, err, stderr)
		}
		lines = append(lines, strings.TrimSuffix(line, "\n"))
	}
	go io.Copy(io.Discard, r)
	return lines, stderr
}
