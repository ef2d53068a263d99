package main

// CPU profiles of the service under load (-profile DIR). The service is
// started with -pprof-addr on a free loopback port, which it names on a line
// of its own; after the measured rounds of each scenario, each target that
// runs the service (on SQLite, and on PostgreSQL its first replica) gets one
// more run, not counted, during which the benchmark takes a CPU profile of
// that process over the run. Profiling costs the service some CPU, so it
// never runs during a measured round. The report lists each profile's top 10
// functions by own time, and the files stay in DIR for `go tool pprof`.

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"math"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"time"
	"unicode"
)

// profilesPrefix starts the line that names the service's profiles.
const profilesPrefix = "petstore profiles on "

// serviceEnv is added to the environment of every service process: with
// -profile, the profiling listener; with -service-env, its settings, which
// serviceEnvSet keeps for the report.
var serviceEnv, serviceEnvSet []string

// serviceEnvFlag adds -service-env to fs: each use adds NAME=VALUE to the
// environment of the service processes alone (serviceEnv), not to the
// ceilings' nor the clients', so that a runtime setting such as GOGC is
// measured on the service against ceilings that run as ever.
func serviceEnvFlag(fs *flag.FlagSet) {
	fs.Func("service-env", "`NAME=VALUE` added to the environment of the service alone, not of the ceilings (repeatable), e.g. GOGC=200", func(v string) error {
		if name, _, ok := strings.Cut(v, "="); !ok || name == "" {
			return errors.New("want NAME=VALUE")
		}
		serviceEnv = append(serviceEnv, v)
		serviceEnvSet = append(serviceEnvSet, v)
		return nil
	})
}

// serviceEnvNote is the end of a report's first line: the settings
// -service-env gave the service, if any.
func serviceEnvNote() string {
	if len(serviceEnvSet) == 0 {
		return ""
	}
	return "; the service's environment: " + strings.Join(serviceEnvSet, " ")
}

// profileRun runs scenario sc on t for o.duration while it takes a CPU
// profile of p, and writes the profile to o.profile.
func profileRun(ctx context.Context, o options, dir, sc string, t target, p *process, n int64) (string, error) {
	file := filepath.Join(o.profile, fmt.Sprintf("%d-%s-%s.pprof", n, sc, fileWord(t.name)))
	err := profileDuring(ctx, p, o.duration, file, func(d time.Duration) error {
		_, err := runWrk(ctx, o, dir, sc, t.url, n, d)
		return err
	})
	if err != nil {
		return "", fmt.Errorf("%s: %w", t.name, err)
	}
	return file, nil
}

// profileDuring runs load for d, rounded up to whole seconds (the profile's
// unit), while it takes a CPU profile of p over the same time, and writes
// the profile to file.
func profileDuring(ctx context.Context, p *process, d time.Duration, file string, load func(d time.Duration) error) error {
	url, err := p.profilesURL()
	if err != nil {
		return err
	}
	seconds := int(math.Ceil(d.Seconds()))
	got := make(chan error, 1)
	go func() { got <- fetchProfile(ctx, fmt.Sprintf("%sprofile?seconds=%d", url, seconds), file) }()
	if err := load(time.Duration(seconds) * time.Second); err != nil {
		<-got
		return err
	}
	if err := <-got; err != nil {
		return fmt.Errorf("CPU profile: %w", err)
	}
	return nil
}

// fileWord is name in lower case with each run of other characters than
// letters and digits as one '-': "PostgreSQL, 2 replicas" is
// "postgresql-2-replicas".
func fileWord(name string) string {
	return strings.Join(strings.FieldsFunc(strings.ToLower(name), func(r rune) bool {
		return !unicode.IsLetter(r) && !unicode.IsDigit(r)
	}), "-")
}

// fetchProfile saves the answer of url to file.
func fetchProfile(ctx context.Context, url, file string) error {
	req, err := http.NewRequestWithContext(ctx, "GET", url, nil)
	if err != nil {
		return err
	}
	res, err := http.DefaultClient.Do(req)
	if err != nil {
		return err
	}
	defer res.Body.Close()
	if res.StatusCode != http.StatusOK {
		b, _ := io.ReadAll(io.LimitReader(res.Body, 512))
		return fmt.Errorf("%s: status %d: %s", url, res.StatusCode, b)
	}
	f, err := os.Create(file)
	if err != nil {
		return err
	}
	if _, err := io.Copy(f, res.Body); err != nil {
		f.Close()
		return err
	}
	return f.Close()
}

// profilesURL is the process's profiles URL, read from its stdout.
func (p *process) profilesURL() (string, error) {
	if p.profiles == nil {
		return "", fmt.Errorf("%s was not started with -pprof-addr", p.cmd.Path)
	}
	select {
	case url := <-p.profiles:
		p.profiles <- url // for the next run
		return url, nil
	case <-time.After(startTimeout):
		return "", fmt.Errorf("%s printed no %q line within %v", p.cmd.Path, profilesPrefix, startTimeout)
	}
}

// profileTop is one function of a profile's top 10.
type profileTop struct {
	name            string
	flatPct, cumPct string
}

// topFunctions reads a profile's top 10 functions with `go tool pprof
// -top`: by own time, or with cum by cumulative time among the service's
// own functions (package main), where the runtime and the libraries would
// otherwise fill the list.
func topFunctions(ctx context.Context, file string, cum bool) ([]profileTop, error) {
	args := []string{"-nodecount=10"}
	if cum {
		args = []string{"-cum", "-nodecount=500"}
	}
	rows, err := pprofTop(ctx, file, args...)
	if err != nil {
		return nil, err
	}
	var top []profileTop
	for _, r := range rows {
		r.name = withoutShapes(r.name)
		if cum && (!strings.HasPrefix(r.name, "main.") || r.name == "main.main") {
			continue
		}
		if top = append(top, r); len(top) == 10 {
			break
		}
	}
	return top, nil
}

// pprofTop reads the rows of `go tool pprof -top` with args for a profile
// file: each function with its own and cumulative share ("12.5%").
func pprofTop(ctx context.Context, file string, args ...string) ([]profileTop, error) {
	args = append(append([]string{"tool", "pprof", "-top"}, args...), file)
	out, err := exec.CommandContext(ctx, "go", args...).Output()
	if err != nil {
		return nil, fmt.Errorf("go tool pprof %s: %w", file, err)
	}
	var rows []profileTop
	table := false
	for line := range strings.Lines(string(out)) {
		fields := strings.Fields(line)
		switch {
		case len(fields) >= 5 && fields[0] == "flat" && fields[1] == "flat%":
			table = true
		case table && len(fields) >= 6:
			rows = append(rows, profileTop{name: strings.Join(fields[5:], " "), flatPct: fields[1], cumPct: fields[4]})
		}
	}
	return rows, nil
}

// withoutShapes shortens each type argument of a generic function's shape
// ("[go.shape.struct { ID int64 ... }]") to "[...]".
func withoutShapes(name string) string {
	var b strings.Builder
	for {
		i := strings.Index(name, "[go.shape.")
		if i < 0 {
			b.WriteString(name)
			return b.String()
		}
		b.WriteString(name[:i] + "[...]")
		depth := 0
		j := i
		for ; j < len(name); j++ {
			if name[j] == '[' {
				depth++
			} else if name[j] == ']' {
				if depth--; depth == 0 {
					break
				}
			}
		}
		if j == len(name) {
			return b.String()
		}
		name = name[j+1:]
	}
}

// printProfiles lists the top 10 of every profile taken.
func printProfiles(w io.Writer, o options, results []sizeResult) {
	if o.profile == "" {
		return
	}
	fmt.Fprintf(w, "\nCPU profiles of the service, one unmeasured run of %v per scenario and target after its rounds (files in %s; `go tool pprof -top FILE` for the rest). Shares are of the profile: the service's CPU over the run.\n", o.duration, o.profile)
	for _, r := range results {
		for _, s := range r.scenarios {
			for _, name := range s.profileOrder {
				file := s.profiles[name]
				flat, err := topFunctions(context.Background(), file, false)
				if err != nil {
					fmt.Fprintf(w, "\n%d pets, %s, %s: %v\n", r.pets, s.name, name, err)
					continue
				}
				cum, err := topFunctions(context.Background(), file, true)
				if err != nil {
					fmt.Fprintf(w, "\n%d pets, %s, %s: %v\n", r.pets, s.name, name, err)
					continue
				}
				fmt.Fprintf(w, "\n%d pets, %s, %s (`%s`): by own time, and the service's own functions by cumulative time\n\n", r.pets, s.name, name, filepath.Base(file))
				fmt.Fprintln(w, "| # | function | own | cumulative | function (package main) | cumulative |")
				fmt.Fprintln(w, "|---:|---|---:|---:|---|---:|")
				for i := range max(len(flat), len(cum)) {
					row := fmt.Sprintf("| %d |", i+1)
					if i < len(flat) {
						row += fmt.Sprintf(" `%s` | %s | %s |", flat[i].name, flat[i].flatPct, flat[i].cumPct)
					} else {
						row += " | | |"
					}
					if i < len(cum) {
						row += fmt.Sprintf(" `%s` | %s |", cum[i].name, cum[i].cumPct)
					} else {
						row += " | |"
					}
					fmt.Fprintln(w, row)
				}
			}
		}
	}
}
