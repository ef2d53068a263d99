package main

import (
	"bytes"
	"encoding/json"
	"fmt"
	"go/ast"
	"go/parser"
	"go/token"
	"maps"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"
	"unicode"

	"github.com/google/go-cmp/cmp"
)

// These tests keep README.md and the guides of docs/ true to the code: their
// links resolve, the settings and the error codes they list are the
// program's, and the README's tour is run against the real binary.

// docFiles returns README.md and every guide of docs/, by path.
func docFiles(t *testing.T) map[string]string {
	t.Helper()
	guides, err := filepath.Glob("docs/*.md")
	if err != nil || len(guides) == 0 {
		t.Fatalf("no guide in docs/ (%v)", err)
	}
	files := map[string]string{}
	for _, path := range append([]string{"README.md"}, guides...) {
		files[path] = readFile(t, path)
	}
	return files
}

// fence opens and closes a fenced code block.
var fence = regexp.MustCompile("^\\s*(```|~~~)")

// proseLines returns the lines of a Markdown text outside its fenced code
// blocks, each with its 1-based line number.
func proseLines(text string) (lines []string, numbers []int) {
	inCode := false
	for i, line := range strings.Split(text, "\n") {
		if fence.MatchString(line) {
			inCode = !inCode
			continue
		}
		if !inCode {
			lines = append(lines, line)
			numbers = append(numbers, i+1)
		}
	}
	return lines, numbers
}

// heading is an ATX heading line: its level and its text.
var heading = regexp.MustCompile(`^(#{1,6})\s+(.*?)\s*#*\s*$`)

// inlineLink is a Markdown link or image: [text](target) or ![alt](target).
var inlineLink = regexp.MustCompile(`!?\[[^\]]*\]\(([^)\s]+)\)`)

// codeSpan is inline code, whose brackets are not links.
var codeSpan = regexp.MustCompile("`[^`]*`")

// anchors returns the anchors GitHub gives the headings of a Markdown text:
// the heading's text lower-cased, without its Markdown (code spans keep their
// text, links keep their text) and without any character but letters, marks,
// digits, connector punctuation, spaces and hyphens; spaces become hyphens;
// a repeated anchor gets -1, -2... in order.
func anchors(text string) map[string]bool {
	out := map[string]bool{}
	seen := map[string]int{}
	lines, _ := proseLines(text)
	for _, line := range lines {
		m := heading.FindStringSubmatch(line)
		if m == nil {
			continue
		}
		title := inlineLink.ReplaceAllStringFunc(m[2], func(l string) string {
			return l[strings.Index(l, "[")+1 : strings.Index(l, "]")]
		})
		var b strings.Builder
		for _, r := range strings.ToLower(title) {
			switch {
			case r == ' ':
				b.WriteRune('-')
			case r == '-', unicode.IsLetter(r), unicode.IsMark(r), unicode.IsDigit(r), unicode.Is(unicode.Pc, r):
				b.WriteRune(r)
			}
		}
		a := b.String()
		if n := seen[a]; n > 0 {
			seen[a]++
			a = fmt.Sprintf("%s-%d", a, n)
		} else {
			seen[a] = 1
		}
		out[a] = true
	}
	return out
}

func TestAnchorsFollowGitHubsRules(t *testing.T) {
	t.Parallel()
	got := anchors("# petstore\n## `GET /v1/pets/{petId}` (getPet, deprecated)\n```sh\n# not a heading\n```\n" +
		"## Decisions where the interface is silent\n### Decisions where the interface is silent\n## On PostgreSQL: 1 and 2 replicas\n" +
		"## The [secret](keys.md) of key_identity\n")
	want := map[string]bool{"petstore": true, "get-v1petspetid-getpet-deprecated": true,
		"decisions-where-the-interface-is-silent": true, "decisions-where-the-interface-is-silent-1": true,
		"on-postgresql-1-and-2-replicas": true, "the-secret-of-key_identity": true}
	if diff := cmp.Diff(want, got); diff != "" {
		t.Errorf("anchors mismatch (-want +got):\n%s", diff)
	}
}

// TestDocsLinksResolve follows every relative link of README.md and docs/:
// the file (or directory) it names exists, and its #anchor is a heading of
// the Markdown file it points into.
func TestDocsLinksResolve(t *testing.T) {
	t.Parallel()
	files := docFiles(t)
	anchorsOf := map[string]map[string]bool{}
	for path, text := range files {
		anchorsOf[path] = anchors(text)
	}
	var links int
	for _, path := range slices.Sorted(maps.Keys(files)) {
		lines, numbers := proseLines(files[path])
		for i, line := range lines {
			for _, m := range inlineLink.FindAllStringSubmatch(codeSpan.ReplaceAllString(line, ""), -1) {
				target := m[1]
				if strings.Contains(target, "://") || strings.HasPrefix(target, "mailto:") {
					continue
				}
				links++
				where := fmt.Sprintf("%s:%d: link %s", path, numbers[i], target)
				file, anchor, _ := strings.Cut(target, "#")
				dest := path
				if file != "" {
					dest = filepath.Join(filepath.Dir(path), file)
					if _, err := os.Stat(dest); err != nil {
						t.Errorf("%s: %v", where, err)
						continue
					}
				}
				if anchor == "" {
					continue
				}
				if _, ok := anchorsOf[dest]; !ok {
					if !strings.HasSuffix(dest, ".md") {
						t.Errorf("%s: an anchor into a file that is not Markdown", where)
						continue
					}
					anchorsOf[dest] = anchors(readFile(t, dest))
				}
				if !anchorsOf[dest][anchor] {
					t.Errorf("%s: %s has no heading with the anchor #%s", where, dest, anchor)
				}
			}
		}
	}
	if links < 20 {
		t.Errorf("found only %d relative links; is the link pattern still right?", links)
	}
}

// TestDocsShape holds the README to what a newcomer reads in five minutes,
// and each guide to a title and a one-line purpose at its top.
func TestDocsShape(t *testing.T) {
	t.Parallel()
	readme := readFile(t, "README.md")
	t.Run("the README is under 300 lines", func(t *testing.T) {
		if n := strings.Count(readme, "\n"); n >= 300 {
			t.Errorf("README.md has %d lines", n)
		}
	})
	t.Run("no line of prose is over 120 characters", func(t *testing.T) {
		// Tables and code blocks cannot be wrapped; in the guides, the
		// long lines are the tables' rows.
		lines, numbers := proseLines(readme)
		for i, line := range lines {
			if n := len([]rune(line)); n > 120 && !strings.HasPrefix(line, "|") {
				t.Errorf("README.md:%d has %d characters", numbers[i], n)
			}
		}
	})
	for path, text := range docFiles(t) {
		if path == "README.md" {
			continue
		}
		t.Run(path+" starts with its title and a one-line purpose", func(t *testing.T) {
			lines := strings.SplitN(text, "\n", 5)
			if len(lines) < 5 || !strings.HasPrefix(lines[0], "# ") || lines[1] != "" || lines[2] == "" || lines[3] != "" {
				t.Errorf("%s does not start with '# Title', a blank line, one line of purpose and a blank line", path)
			}
		})
	}
}

// section returns the part of a Markdown text under the heading title, up
// to the next heading of the same or a higher level.
func section(t *testing.T, text, title string) string {
	t.Helper()
	var out []string
	level := 0
	inCode := false
	for line := range strings.SplitSeq(text, "\n") {
		if fence.MatchString(line) {
			inCode = !inCode
		}
		if m := heading.FindStringSubmatch(line); m != nil && !inCode {
			switch {
			case level == 0 && m[2] == title:
				level = len(m[1])
				continue
			case level > 0 && len(m[1]) <= level:
				return strings.Join(out, "\n")
			}
		}
		if level > 0 {
			out = append(out, line)
		}
	}
	if level == 0 {
		t.Fatalf("no section %q", title)
	}
	return strings.Join(out, "\n")
}

// TestConfigurationDocListsEverySetting compares the settings -h prints
// with the table of docs/configuration.md, both ways: the same flags with
// the same variables, and each default -h prints given in the table.
func TestConfigurationDocListsEverySetting(t *testing.T) {
	t.Parallel()
	var out bytes.Buffer
	run(t.Context(), []string{"-h"}, func(string) string { return "" }, strings.NewReader(""), &bytes.Buffer{}, &out)
	helpRow := regexp.MustCompile(`(?m)^(-[a-z-]+)?\s+(PETSTORE_[A-Z_]+)\s+(\S+)\s`)
	printed := map[string]string{} // "flag variable" -> default
	for _, m := range helpRow.FindAllStringSubmatch(out.String(), -1) {
		printed[m[1]+" "+m[2]] = m[3]
	}
	if len(printed) < 10 {
		t.Fatalf("-h printed only %d settings:\n%s", len(printed), out.String())
	}
	table := section(t, readFile(t, "docs/configuration.md"), "Settings")
	docRow := regexp.MustCompile("(?m)^\\| (?:`(-[a-z-]+)`)? *\\| `(PETSTORE_[A-Z_]+)` \\| ([^|]*) \\|")
	documented := map[string]string{}
	for _, m := range docRow.FindAllStringSubmatch(table, -1) {
		documented[m[1]+" "+m[2]] = m[3]
	}
	if diff := cmp.Diff(slices.Sorted(maps.Keys(printed)), slices.Sorted(maps.Keys(documented))); diff != "" {
		t.Errorf("settings of -h (-) and of docs/configuration.md (+) differ:\n%s", diff)
	}
	for setting, def := range printed {
		if doc, ok := documented[setting]; ok && def != "(none)" && !strings.Contains(doc, "`"+def+"`") {
			t.Errorf("%s: -h gives the default %s, docs/configuration.md %q", setting, def, doc)
		}
	}
}

// TestAPIDocListsEveryErrorCode compares the error codes errors.go declares,
// with the status each travels with, to the table of errors in docs/api.md,
// both ways. The codes are read from the source, so a new code fails this
// test until it is documented.
func TestAPIDocListsEveryErrorCode(t *testing.T) {
	t.Parallel()
	f, err := parser.ParseFile(token.NewFileSet(), "errors.go", nil, 0)
	if err != nil {
		t.Fatal(err)
	}
	declared := map[string]string{}
	for _, decl := range f.Decls {
		gd, ok := decl.(*ast.GenDecl)
		if !ok || gd.Tok != token.CONST {
			continue
		}
		for _, spec := range gd.Specs {
			vs := spec.(*ast.ValueSpec)
			for i, name := range vs.Names {
				lit, ok := vs.Values[i].(*ast.BasicLit)
				if !strings.HasPrefix(name.Name, "code") || !ok || lit.Kind != token.STRING {
					continue
				}
				code, _ := strconv.Unquote(lit.Value)
				declared[code] = strconv.Itoa(statusOf(code))
			}
		}
	}
	if len(declared) < 10 {
		t.Fatalf("found only %d error codes in errors.go", len(declared))
	}
	documented := map[string]string{}
	row := regexp.MustCompile("(?m)^\\| `([a-z_]+)` \\| ([0-9]{3}) \\|")
	for _, m := range row.FindAllStringSubmatch(section(t, readFile(t, "docs/api.md"), "Errors"), -1) {
		documented[m[1]] = m[2]
	}
	if diff := cmp.Diff(declared, documented); diff != "" {
		t.Errorf("error codes of errors.go (-) and of docs/api.md's table (+) differ:\n%s", diff)
	}
}

// tourCommand is one command of the README's tour and the answer the README
// shows for it.
type tourCommand struct {
	command, want string
}

// readmeTour reads the commands of the README's tour (see shellTour).
func readmeTour(t *testing.T) []tourCommand { return shellTour(t, "README.md", "A tour") }

// shellTour reads the commands of a section of a guide: every line of its sh
// blocks (a line ending in \ continues on the next), each followed by the
// answer it prints, as comment lines starting with "# ".
func shellTour(t *testing.T, file, heading string) []tourCommand {
	t.Helper()
	var cmds []tourCommand
	inBlock := false
	pending := ""
	for line := range strings.SplitSeq(section(t, readFile(t, file), heading), "\n") {
		switch {
		case !inBlock && strings.TrimSpace(line) == "```sh":
			inBlock = true
		case inBlock && strings.TrimSpace(line) == "```":
			inBlock = false
		case !inBlock:
		case strings.HasPrefix(line, "# ") && pending == "" && len(cmds) > 0:
			c := &cmds[len(cmds)-1]
			c.want = strings.TrimPrefix(c.want+"\n"+strings.TrimPrefix(line, "# "), "\n")
		case strings.HasSuffix(line, `\`):
			pending += strings.TrimSuffix(line, `\`)
		case strings.TrimSpace(line) != "":
			cmds = append(cmds, tourCommand{command: pending + line})
			pending = ""
		}
	}
	return cmds
}

// tourTime is a timestamp of an order, which differs from run to run.
var tourTime = regexp.MustCompile(`"[0-9]{4}-[0-9]{2}-[0-9]{2}T[0-9]{2}:[0-9]{2}:[0-9]{2}\.[0-9]{3}Z"`)

// TestTheREADMETourRuns does what the README tells a newcomer: it starts the
// built binary with no setting at all in a directory of its own, then runs
// the tour's commands, as parsed from the README, with sh and curl in that
// directory, and compares what each prints with the answer the README shows
// (timestamps aside, and JSON whatever its layout). A command added to the tour is run with no change
// here.
func TestTheREADMETourRuns(t *testing.T) {
	t.Parallel()
	if testing.Short() {
		t.Skip("runs the real binary")
	}
	curl, err := exec.LookPath("curl")
	missingPart(t, "the README's tour (curl)", "apt-get install curl", err)
	cmds := readmeTour(t)
	if len(cmds) < 4 {
		t.Fatalf("the tour has %d commands: %q", len(cmds), cmds)
	}
	dir := t.TempDir()
	cmd := exec.Command(buildBinary(t))
	cmd.Dir = dir
	// Nothing configured, as on a newcomer's machine (an empty variable is
	// no setting); only the port is free rather than 8080.
	svc := startCommand(t, cmd, "PETSTORE_ADDR=127.0.0.1:0", "PETSTORE_DB=", "PETSTORE_API_KEYS=", "PETSTORE_API_KEYS_FILE=", "PETSTORE_SECRET_FILE=")

	var commands []string
	for _, c := range cmds {
		commands = append(commands, strings.ReplaceAll(c.command, "http://localhost:8080", svc.URL))
	}
	answers := runCommands(t, dir, curl, commands)
	for i, c := range cmds {
		if i >= len(answers) {
			t.Errorf("%s: no answer", c.command)
			continue
		}
		got := tourTime.ReplaceAllString(strings.TrimSpace(answers[i]), `"TIME"`)
		want := tourTime.ReplaceAllString(c.want, `"TIME"`)
		// An answer the README shows as JSON may be spread over lines for
		// the reader: JSON is compared without its layout.
		var gotJSON, wantJSON bytes.Buffer
		if json.Compact(&gotJSON, []byte(got)) == nil && json.Compact(&wantJSON, []byte(want)) == nil {
			got, want = gotJSON.String(), wantJSON.String()
		}
		if got != want {
			t.Errorf("%s\nprinted %q\nthe README shows %q", c.command, got, want)
		}
	}
}

// runCommands runs commands with sh in dir, one script that stops at the
// first failure, with curl on the path, and returns what each printed.
func runCommands(t *testing.T, dir, curl string, commands []string) []string {
	t.Helper()
	const separator = "@@ end of a command @@"
	var script strings.Builder
	script.WriteString("set -e\n")
	for _, c := range commands {
		script.WriteString(c + "\n")
		fmt.Fprintf(&script, "printf '\\n%s\\n'\n", separator)
	}
	sh := exec.CommandContext(t.Context(), "sh", "-c", script.String())
	sh.Dir = dir
	sh.Env = append(os.Environ(), "PATH="+filepath.Dir(curl)+string(os.PathListSeparator)+os.Getenv("PATH"))
	var stderr bytes.Buffer
	sh.Stderr = &stderr
	out, err := sh.Output()
	if err != nil {
		t.Fatalf("the commands failed: %v\n%s\nstderr: %s\nscript:\n%s", err, out, stderr.String(), script.String())
	}
	return strings.Split(string(out), "\n"+separator+"\n")
}

// TestTheHTTPSGuideRuns runs the commands of docs/https.md for your own
// certificate: the service started as the guide starts it (on a free port
// rather than 8443), with a certificate this test made for 127.0.0.1 as
// cert.pem and key.pem, then the guide's curl commands with sh, each
// compared with the answer the guide shows.
func TestTheHTTPSGuideRuns(t *testing.T) {
	t.Parallel()
	if testing.Short() {
		t.Skip("runs the real binary")
	}
	curl, err := exec.LookPath("curl")
	missingPart(t, "the HTTPS guide's commands (curl)", "apt-get install curl", err)
	cmds := shellTour(t, "docs/https.md", "Try it")
	dir := t.TempDir()
	c := makeCert(t, dir, "cert", time.Now().Add(time.Hour))
	replace(t, c.certFile, filepath.Join(dir, "cert.pem"))
	replace(t, c.keyFile, filepath.Join(dir, "key.pem"))
	const guideURL, guideAddr = "https://127.0.0.1:8443", "127.0.0.1:8443"
	var svc *process
	var commands []string
	var checked []tourCommand
	for _, cmd := range cmds {
		args := strings.Fields(cmd.command)
		if args[0] == "petstore" && args[len(args)-1] == "&" {
			// The service, started here so that this test ends it by its
			// PID; the same arguments, on a free port.
			if !strings.Contains(cmd.command, guideAddr) {
				t.Fatalf("the guide starts the service without -addr %s: %s", guideAddr, cmd.command)
			}
			args = slices.Replace(args[1:len(args)-1:len(args)-1], slices.Index(args[1:], guideAddr), slices.Index(args[1:], guideAddr)+1, "127.0.0.1:0")
			run := exec.Command(buildBinary(t), args...)
			run.Dir = dir
			svc = startCommand(t, run, "PETSTORE_API_KEYS=", "PETSTORE_API_KEYS_FILE=", "PETSTORE_SECRET_FILE=")
			continue
		}
		if svc == nil {
			t.Fatalf("the guide runs %q before it starts the service", cmd.command)
		}
		commands = append(commands, strings.ReplaceAll(cmd.command, guideURL, svc.URL))
		checked = append(checked, cmd)
	}
	if len(checked) < 2 {
		t.Fatalf("the guide has %d commands to check: %q", len(checked), cmds)
	}
	answers := runCommands(t, dir, curl, commands)
	for i, c := range checked {
		if i >= len(answers) || strings.TrimSpace(answers[i]) != c.want {
			t.Errorf("%s\nprinted %q\nthe guide shows %q", c.command, answers[min(i, len(answers)-1)], c.want)
		}
	}
}

// TestGuidesNamedByTheProgramExist follows the guides that -h and the
// reference page send a reader to: each names a file of docs/.
func TestGuidesNamedByTheProgramExist(t *testing.T) {
	t.Parallel()
	var help bytes.Buffer
	run(t.Context(), []string{"-h"}, func(string) string { return "" }, strings.NewReader(""), &bytes.Buffer{}, &help)
	named := map[string][]string{
		"-h":                   regexp.MustCompile(`docs/[a-z]+\.md`).FindAllString(help.String(), -1),
		"reference/index.html": regexp.MustCompile(`/docs/\{\{version\}\}/([a-z]+\.md)`).FindAllString(readFile(t, "reference/index.html"), -1),
	}
	for where, guides := range named {
		if len(guides) == 0 {
			t.Errorf("%s names no guide of docs/", where)
		}
		for _, g := range guides {
			file := filepath.Join("docs", filepath.Base(g))
			if _, err := os.Stat(file); err != nil {
				t.Errorf("%s names %s: %v", where, g, err)
			}
		}
	}
}
