// Command soak runs the pet store under a mixed load for a chosen time,
// killing it with SIGKILL (and now and then SIGTERM) at random moments and
// restarting it on the same database file, and checks that nothing a client
// was told is stored ever goes missing. It is not part of CI; run it from the
// repository root:
//
//	go run ./soak -duration 5m
//
// It prints what it did and found, and exits 1 when any acknowledged pet was
// lost, any answer was a 5xx, a retried Idempotency-Key made a duplicate, or
// the database fails its integrity check.
package main

import (
	"bufio"
	"context"
	"crypto/rand"
	"database/sql"
	"encoding/hex"
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"io"
	mrand "math/rand/v2"
	"net/http"
	"os"
	"os/exec"
	"os/signal"
	"path/filepath"
	"regexp"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"time"

	_ "modernc.org/sqlite" // for PRAGMA integrity_check on the file between runs
)

func main() {
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer stop()
	if err := run(ctx, os.Args[1:], os.Stdout, os.Stderr); err != nil {
		if !errors.Is(err, flag.ErrHelp) {
			fmt.Fprintf(os.Stderr, "soak: %v\n", err)
		}
		os.Exit(1)
	}
}

// pet is the API's Pet.
type pet struct {
	ID         int64  `json:"id"`
	Name       string `json:"name"`
	CategoryID int64  `json:"categoryId"`
	Status     string `json:"status"`
}

// keyedCreate is a create sent with an Idempotency-Key.
type keyedCreate struct {
	name, body, key string
	answered        bool
}

// soak is the state of one soak run: what was sent, what was acknowledged.
type soak struct {
	url, apiKey string
	client      *http.Client

	mu       sync.Mutex
	acked    map[string]pet // by name; names are unique
	keyed    []keyedCreate
	requests atomic.Int64
	fivexx   atomic.Int64
	netErrs  atomic.Int64 // connection errors while the service was meant to be up
	retried  int          // keyed creates retried after a stop cut them off
}

// run parses the flags and runs the soak until the duration is over or ctx
// is cancelled.
func run(ctx context.Context, args []string, stdout, stderr io.Writer) error {
	fs := flag.NewFlagSet("soak", flag.ContinueOnError)
	fs.SetOutput(stderr)
	duration := fs.Duration("duration", time.Minute, "how long to run")
	clients := fs.Int("clients", 32, "concurrent clients")
	killEvery := fs.Duration("kill-every", 5*time.Second, "mean time between kills (each is uniform in [0.5, 1.5] of it)")
	bin := fs.String("bin", "", "the petstore binary; empty builds the package in the current directory")
	if err := fs.Parse(args); err != nil {
		return err
	}
	dir, err := os.MkdirTemp("", "petstore-soak-")
	if err != nil {
		return err
	}
	defer os.RemoveAll(dir)
	if *bin == "" {
		*bin = filepath.Join(dir, "petstore")
		// The build command of docs/operations.md.
		build := exec.CommandContext(ctx, "go", "build", "-trimpath", "-buildvcs=true", "-o", *bin, ".")
		build.Env = append(os.Environ(), "CGO_ENABLED=0")
		if out, err := build.CombinedOutput(); err != nil {
			return fmt.Errorf("go build (run soak from the repository root): %v\n%s", err, out)
		}
	}
	dbPath := filepath.Join(dir, "soak.db")
	keyBytes := make([]byte, 16)
	rand.Read(keyBytes)
	s := &soak{
		apiKey: hex.EncodeToString(keyBytes),
		client: &http.Client{Transport: &http.Transport{MaxIdleConnsPerHost: *clients}, Timeout: 30 * time.Second},
		acked:  map[string]pet{},
	}
	env := []string{"PETSTORE_ADDR=127.0.0.1:0", "PETSTORE_DB=" + dbPath, "PETSTORE_API_KEYS=" + s.apiKey}

	var kills, terms, verified, duplicates int
	lost := map[string]bool{} // names of acknowledged pets found missing or changed
	deadline := time.Now().Add(*duration)
	fmt.Fprintf(stdout, "soak: %v, %d clients, a kill every ~%v, database %s\n", *duration, *clients, *killEvery, dbPath)
	for cycle := 0; time.Now().Before(deadline) && ctx.Err() == nil; cycle++ {
		cmd, url, err := start(*bin, env)
		if err != nil {
			return err
		}
		s.url = url
		// After every restart: everything acknowledged so far is there.
		v, err := s.verify(ctx, lost)
		if err != nil {
			cmd.Process.Kill()
			cmd.Wait()
			return err
		}
		verified = v
		if err := s.retryKeyed(ctx); err != nil {
			cmd.Process.Kill()
			cmd.Wait()
			return err
		}

		life := time.Duration(float64(*killEvery) * (0.5 + mrand.Float64()))
		life = min(life, max(0, time.Until(deadline)))
		stopLoad := make(chan struct{})
		var stopping atomic.Bool
		var wg sync.WaitGroup
		for c := range *clients {
			wg.Go(func() { s.runClient(cycle, c, stopLoad, &stopping) })
		}
		select {
		case <-time.After(life):
		case <-ctx.Done():
		}
		stopping.Store(true)
		// Every fourth stop is a SIGTERM, the others a SIGKILL; both only
		// to the process this command started, by its PID.
		sig := syscall.SIGKILL
		if cycle%4 == 3 {
			sig = syscall.SIGTERM
			terms++
		} else {
			kills++
		}
		cmd.Process.Signal(sig)
		close(stopLoad)
		wg.Wait()
		cmd.Wait()
		if res, err := integrityCheck(dbPath); err != nil || res != "ok" {
			return fmt.Errorf("integrity_check after stop %d: %q, %v", cycle, res, err)
		}
	}

	// A last start to check the final state.
	cmd, url, err := start(*bin, env)
	if err != nil {
		return err
	}
	s.url = url
	// Retrying cannot bring back an acknowledged pet (only unanswered
	// creates are retried), so verifying after it still finds every loss.
	err = s.retryKeyed(ctx)
	if err == nil {
		verified, err = s.verify(ctx, lost)
	}
	if err == nil {
		duplicates, err = s.duplicates(ctx)
	}
	cmd.Process.Signal(syscall.SIGTERM)
	cmd.Wait()
	if err != nil {
		return err
	}
	integrity, err := integrityCheck(dbPath)
	if err != nil {
		return err
	}
	fmt.Fprintf(stdout, "requests: %d (5xx: %d, connection errors while up: %d)\n", s.requests.Load(), s.fivexx.Load(), s.netErrs.Load())
	fmt.Fprintf(stdout, "kills: %d SIGKILL, %d SIGTERM\n", kills, terms)
	fmt.Fprintf(stdout, "pets verified: %d (acknowledged: %d; creates with an Idempotency-Key: %d, of which %d retried after a stop)\n", verified, len(s.acked), len(s.keyed), s.retried)
	fmt.Fprintf(stdout, "lost: %d\n", len(lost))
	fmt.Fprintf(stdout, "duplicates from retried Idempotency-Keys: %d\n", duplicates)
	fmt.Fprintf(stdout, "integrity_check: %s\n", integrity)
	if len(lost) > 0 || s.fivexx.Load() > 0 || s.netErrs.Load() > 0 || duplicates > 0 || integrity != "ok" {
		return errors.New("FAILED: something acknowledged was lost or duplicated, or the service failed a request while up")
	}
	fmt.Fprintln(stdout, "PASS")
	return nil
}

// urlLine is the service's launch contract.
var urlLine = regexp.MustCompile(`petstore listening on (http://127\.0\.0\.1:[0-9]+)`)

// start runs the binary and waits for its URL line.
func start(bin string, env []string) (*exec.Cmd, string, error) {
	cmd := exec.Command(bin)
	cmd.Env = append(os.Environ(), env...)
	stdout, err := cmd.StdoutPipe()
	if err != nil {
		return nil, "", err
	}
	if err := cmd.Start(); err != nil {
		return nil, "", err
	}
	line, err := bufio.NewReader(stdout).ReadString('\n')
	m := urlLine.FindStringSubmatch(line)
	if err != nil || m == nil {
		cmd.Process.Kill()
		cmd.Wait()
		return nil, "", fmt.Errorf("the service printed no URL line (%q, %v)", line, err)
	}
	go io.Copy(io.Discard, stdout)
	return cmd, m[1], nil
}

// runClient is one client: 90% reads, 10% creates (half of them with an
// Idempotency-Key), until stop is closed.
func (s *soak) runClient(cycle, c int, stop <-chan struct{}, stopping *atomic.Bool) {
	for i := 0; ; i++ {
		select {
		case <-stop:
			return
		default:
		}
		if mrand.IntN(10) != 0 {
			path := fmt.Sprintf("/v1/pets?limit=20&after=%d", mrand.IntN(1000))
			if _, _, err := s.do("GET", path, "", ""); err != nil && !stopping.Load() {
				s.netErrs.Add(1)
			}
			continue
		}
		name := fmt.Sprintf("soak-%d-%d-%d", cycle, c, i)
		body := fmt.Sprintf(`{"name":%q,"categoryId":%d}`, name, i+1)
		key := ""
		if i%2 == 0 {
			key = "key-" + name
		}
		status, b, err := s.do("POST", "/v1/pets", body, key)
		answered := err == nil && status == http.StatusCreated
		if answered {
			var p pet
			if json.Unmarshal(b, &p) == nil {
				s.mu.Lock()
				s.acked[name] = p
				s.mu.Unlock()
			}
		}
		if key != "" {
			s.mu.Lock()
			s.keyed = append(s.keyed, keyedCreate{name: name, body: body, key: key, answered: answered})
			s.mu.Unlock()
		}
		if err != nil && !stopping.Load() {
			s.netErrs.Add(1)
		}
	}
}

// do sends one request and counts it.
func (s *soak) do(method, path, body, idemKey string) (int, []byte, error) {
	var rd io.Reader
	if body != "" {
		rd = strings.NewReader(body)
	}
	req, err := http.NewRequest(method, s.url+path, rd)
	if err != nil {
		return 0, nil, err
	}
	req.Header.Set("Authorization", "Bearer "+s.apiKey)
	if idemKey != "" {
		req.Header.Set("Idempotency-Key", idemKey)
	}
	s.requests.Add(1)
	res, err := s.client.Do(req)
	if err != nil {
		return 0, nil, err
	}
	defer res.Body.Close()
	b, err := io.ReadAll(res.Body)
	if res.StatusCode >= 500 {
		s.fivexx.Add(1)
	}
	return res.StatusCode, b, err
}

// all lists every pet, page by page.
func (s *soak) all(ctx context.Context) ([]pet, error) {
	var pets []pet
	after := int64(0)
	for ctx.Err() == nil {
		status, b, err := s.do("GET", fmt.Sprintf("/v1/pets?limit=100&after=%d", after), "", "")
		if err != nil || status != http.StatusOK {
			return nil, fmt.Errorf("list after %d: status %d, %v", after, status, err)
		}
		var page []pet
		if err := json.Unmarshal(b, &page); err != nil {
			return nil, err
		}
		pets = append(pets, page...)
		if len(page) < 100 {
			return pets, nil
		}
		after = page[len(page)-1].ID
	}
	return nil, ctx.Err()
}

// verify checks that every acknowledged pet is stored, unchanged, returns
// how many are, and adds the names of the others to lost.
func (s *soak) verify(ctx context.Context, lost map[string]bool) (verified int, err error) {
	pets, err := s.all(ctx)
	if err != nil {
		return 0, err
	}
	byName := make(map[string]pet, len(pets))
	for _, p := range pets {
		byName[p.Name] = p
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	for name, want := range s.acked {
		if got, ok := byName[name]; ok && got == want {
			verified++
		} else {
			lost[name] = true
		}
	}
	return verified, nil
}

// retryKeyed retries every keyed create that got no answer, as a client
// would: each must now succeed, once.
func (s *soak) retryKeyed(ctx context.Context) error {
	s.mu.Lock()
	pending := []int{}
	for i, k := range s.keyed {
		if !k.answered {
			pending = append(pending, i)
		}
	}
	s.mu.Unlock()
	for _, i := range pending {
		if ctx.Err() != nil {
			return ctx.Err()
		}
		k := s.keyed[i]
		status, b, err := s.do("POST", "/v1/pets", k.body, k.key)
		if err != nil || status != http.StatusCreated {
			return fmt.Errorf("retry of %s: status %d, %v", k.name, status, err)
		}
		var p pet
		if err := json.Unmarshal(b, &p); err != nil {
			return err
		}
		s.mu.Lock()
		s.keyed[i].answered = true
		s.acked[k.name] = p
		s.retried++
		s.mu.Unlock()
	}
	return nil
}

// duplicates counts names stored more than once: a retried key that made a
// second pet.
func (s *soak) duplicates(ctx context.Context) (int, error) {
	pets, err := s.all(ctx)
	if err != nil {
		return 0, err
	}
	seen := map[string]int{}
	dups := 0
	for _, p := range pets {
		if seen[p.Name]++; seen[p.Name] == 2 {
			dups++
		}
	}
	return dups, nil
}

// integrityCheck runs PRAGMA integrity_check on the database file.
func integrityCheck(path string) (string, error) {
	db, err := sql.Open("sqlite", path)
	if err != nil {
		return "", err
	}
	defer db.Close()
	var res string
	err = db.QueryRow("PRAGMA integrity_check").Scan(&res)
	return res, err
}
