package main

import (
	"bytes"
	"encoding/json"
	"fmt"
	"maps"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"slices"
	"strconv"
	"strings"
	"testing"

	"github.com/google/go-cmp/cmp"
)

// The third-party OpenAPI tools that CI runs against the document and the
// real binary, pinned by contract/package-lock.json and installed there by
// .ci/run with npm ci (see docs/development.md, "The contract tools").

// contractToolsKey is the API key of the binaries the tools talk to.
const contractToolsKey = "contract-tools-key-0123456789"

// contractTools runs the programs `npm ci` installed in contract/.
type contractTools struct {
	dir string   // contract/, absolute
	env []string // the environment of every tool
}

// run runs the tool name with args in dir and returns what it printed on
// standard output and on standard error.
func (c contractTools) run(t *testing.T, dir, name string, args ...string) (stdout, stderr string, err error) {
	t.Helper()
	cmd := exec.CommandContext(t.Context(), filepath.Join(c.dir, "node_modules", ".bin", name), args...)
	cmd.Dir = dir
	cmd.Env = c.env
	var out, errOut bytes.Buffer
	cmd.Stdout, cmd.Stderr = &out, &errOut
	err = cmd.Run()
	return out.String(), errOut.String(), err
}

// TestContractTools proves the served document usable as-is by the common
// OpenAPI tools: it lints it with Redocly and Spectral, runs Dredd and a
// Portman collection (through newman) against the real binary, and builds
// TypeScript types from it with openapi-typescript, which tsc compiles with
// a live test that then runs against the binary. Each tool that sends
// requests gets a binary of its own over a fresh database, holding the pets
// of listPets' example: the examples tell one story, which each tool
// replays from its start. So the tools run side by side, each in a
// parallel subtest: one after the other they took a minute of the run.
func TestContractTools(t *testing.T) {
	t.Parallel()
	dir, err := filepath.Abs("contract")
	if err != nil {
		t.Fatal(err)
	}
	_, err = exec.LookPath("node")
	if err == nil {
		_, err = os.Stat(filepath.Join(dir, "node_modules", ".bin", "redocly"))
	}
	missingPart(t, "the OpenAPI tools of contract/", "install Node.js 20.19 or later, then run npm ci in contract/", err)
	tools := contractTools{dir: dir, env: append(os.Environ(),
		// No tool may report usage or check for updates: CI reaches only
		// the package registries, and a test talks to nothing but the
		// binary.
		"SCARF_ANALYTICS=false", "REDOCLY_TELEMETRY=off", "REDOCLY_SUPPRESS_UPDATE_NOTICE=true", "DO_NOT_TRACK=1",
		"NO_COLOR=1", "FORCE_COLOR=0")}

	doc := loadContract(t)
	ex := documentExamples{t: t, doc: doc}
	bin := buildBinary(t)
	work := t.TempDir()
	seed := filepath.Join(work, "seed.json")
	var pets []map[string]any
	for _, p := range ex.response("listPets", 200).([]any) {
		np := maps.Clone(p.(map[string]any))
		delete(np, "id")
		pets = append(pets, np)
	}
	writeFile(t, seed, mustJSON(t, pets))
	// start runs a binary over a fresh database; with the seed, it holds
	// the pets of listPets' example, with their ids.
	start := func(t *testing.T, seeded bool) string {
		t.Helper()
		env := []string{"PETSTORE_ADDR=127.0.0.1:0", "PETSTORE_DB=" + filepath.Join(t.TempDir(), "pets.db"), "PETSTORE_API_KEYS=" + contractToolsKey}
		if seeded {
			env = append(env, "PETSTORE_SEED="+seed)
		}
		p := startBinary(t, bin, env...)
		if seeded {
			res := doRequest(t, p.URL, "GET", "/v1/pets", "", map[string]string{"Authorization": "Bearer " + contractToolsKey})
			if diff := cmp.Diff(ex.response("listPets", 200), decodeJSON(t, res.Body)); diff != "" {
				t.Fatalf("the seeded store is not the one listPets' example shows (-example +store):\n%s", diff)
			}
		}
		return p.URL
	}

	// The document the tools read is the one the binary serves.
	served := doRequest(t, start(t, false), "GET", "/v1/openapi.json", "", nil)
	if string(served.Body) != openapiDocument {
		t.Fatalf("the binary serves another document than openapi.json")
	}
	document := filepath.Join(work, "openapi.json")
	writeFile(t, document, openapiDocument)
	// The linters read openapi.json itself, the same bytes: Redocly's
	// ignore file names the problems it accepts by that file's path.
	repoDocument, err := filepath.Abs("openapi.json")
	if err != nil {
		t.Fatal(err)
	}

	t.Run("Redocly lint, recommended rules: no error, no warning", func(t *testing.T) {
		t.Parallel()
		stdout, stderr, err := tools.run(t, work, "redocly", "lint", "--config", filepath.Join(dir, "redocly.yaml"), "--format=json", repoDocument)
		var report struct {
			Totals   struct{ Errors, Warnings, Ignored int }
			Problems []struct {
				RuleID  string `json:"ruleId"`
				Message string
			}
		}
		if jsonErr := json.Unmarshal([]byte(stdout), &report); jsonErr != nil {
			t.Fatalf("redocly lint: %v; %v\n%s\n%s", err, jsonErr, stdout, stderr)
		}
		// The three problems .redocly.lint-ignore.yaml accepts, with why.
		want := struct{ Errors, Warnings, Ignored int }{0, 0, 3}
		if diff := cmp.Diff(want, report.Totals); diff != "" || err != nil {
			t.Errorf("redocly lint: %v; totals mismatch (-want +got):\n%s\nproblems: %+v", err, diff, report.Problems)
		}
		t.Logf("redocly lint: %d errors, %d warnings, %d ignored", report.Totals.Errors, report.Totals.Warnings, report.Totals.Ignored)
	})

	t.Run("Spectral lint, spectral:oas: no problem at all", func(t *testing.T) {
		t.Parallel()
		results := filepath.Join(t.TempDir(), "spectral.json")
		_, stderr, err := tools.run(t, work, "spectral", "lint", "--ruleset", filepath.Join(dir, "spectral.yaml"),
			"--format", "json", "--output", results, "--fail-severity", "hint", repoDocument)
		b, readErr := os.ReadFile(results)
		var problems []struct {
			Code     string
			Message  string
			Path     []any
			Severity int
		}
		if readErr != nil || json.Unmarshal(b, &problems) != nil {
			t.Fatalf("spectral lint: %v, %v\n%s\n%s", err, readErr, b, stderr)
		}
		if len(problems) > 0 || err != nil {
			t.Errorf("spectral lint: %v; %d problems: %+v", err, len(problems), problems)
		}
	})

	t.Run("Dredd: every 2xx example request gets an answer that matches the document", func(t *testing.T) {
		t.Parallel()
		url := start(t, true)
		stdout, stderr, err := tools.run(t, work, "dredd", document, url+"/v1",
			"--hookfiles", filepath.Join(dir, "dredd-hooks.js"),
			"--header", "Authorization: Bearer "+contractToolsKey, "--color", "false")
		m := regexp.MustCompile(`complete: (\d+) passing, (\d+) failing, (\d+) errors, (\d+) skipped, (\d+) total`).FindStringSubmatch(stdout)
		if m == nil {
			t.Fatalf("dredd: %v; no summary line\n%s\n%s", err, stdout, stderr)
		}
		got := map[string]int{}
		for i, name := range []string{"passing", "failing", "errors", "skipped", "total"} {
			got[name], _ = strconv.Atoi(m[i+1])
		}
		// Dredd makes a transaction for every documented response, request
		// media type and response media type; the hooks skip all but the
		// 2xx ones, and the stream of listEvents, which never ends (see
		// contract/dredd-hooks.js).
		passing, total := 0, 0
		for _, item := range doc.Paths.Map() {
			for _, op := range item.Operations() {
				bodies := 1
				if op.RequestBody != nil {
					bodies = len(op.RequestBody.Value.Content)
				}
				for status, ref := range op.Responses.Map() {
					answers := slices.Collect(maps.Keys(ref.Value.Content))
					if len(answers) == 0 {
						answers = []string{""} // no body, one transaction
					}
					for _, mt := range answers {
						total += bodies
						if strings.HasPrefix(status, "2") && mt != eventStreamType {
							passing += bodies
						}
					}
				}
			}
		}
		want := map[string]int{"passing": passing, "failing": 0, "errors": 0, "skipped": total - passing, "total": total}
		if diff := cmp.Diff(want, got); diff != "" || err != nil {
			t.Errorf("dredd: %v; summary mismatch (-want +got):\n%s\n%s", err, diff, stdout)
		}
		t.Logf("dredd: %s", m[0])
	})

	t.Run("Portman's collection, run by newman: 100% of assertions pass, with the 401, 400 and 404 variations", func(t *testing.T) {
		t.Parallel()
		url := start(t, true)
		// Portman writes its working files into the current directory.
		run := t.TempDir()
		collection := filepath.Join(run, "collection.json")
		stdout, stderr, err := tools.run(t, run, "portman", "--local", document, "--baseUrl", url+"/v1",
			"--portmanConfigFile", filepath.Join(dir, "portman-config.json"),
			"--postmanConfigFile", filepath.Join(dir, "postman-config.json"),
			"--output", collection, "--syncPostman", "false", "--runNewman", "false")
		if err != nil {
			t.Fatalf("portman: %v\n%s\n%s", err, stdout, stderr)
		}
		report := filepath.Join(run, "newman.json")
		stdout, stderr, err = tools.run(t, run, "newman", "run", collection,
			"--env-var", "bearerToken="+contractToolsKey, "--env-var", "rootUrl="+url,
			"--reporters", "cli,json", "--reporter-json-export", report, "--color", "off")
		b, readErr := os.ReadFile(report)
		var result newmanReport
		if readErr != nil || json.Unmarshal(b, &result) != nil {
			t.Fatalf("newman: %v, %v\n%s\n%s", err, readErr, stdout, stderr)
		}
		assertions := result.Run.Stats.Assertions
		if err != nil || assertions.Failed > 0 || assertions.Total == 0 {
			t.Errorf("newman: %v; %d of %d assertions failed\n%s", err, assertions.Failed, assertions.Total, stdout)
		}
		if diff := cmp.Diff(portmanRequests(t, ex, dir), result.answers(t, ex)); diff != "" {
			t.Errorf("requests mismatch (-want +ran):\n%s", diff)
		}
		t.Logf("newman: %d requests, %d assertions, %d failed", result.Run.Stats.Requests.Total, assertions.Total, assertions.Failed)
	})

	t.Run("openapi-typescript's types compile with tsc, and a live test typed by them passes", func(t *testing.T) {
		t.Parallel()
		url := start(t, false)
		build := t.TempDir()
		for _, name := range []string{"live.mts", "tsconfig.json"} {
			b, err := os.ReadFile(filepath.Join(dir, "typescript", name))
			if err != nil {
				t.Fatal(err)
			}
			writeFile(t, filepath.Join(build, name), string(b))
		}
		// The build finds openapi-fetch and the Node types where npm ci
		// put them.
		if err := os.Symlink(filepath.Join(dir, "node_modules"), filepath.Join(build, "node_modules")); err != nil {
			t.Fatal(err)
		}
		if stdout, stderr, err := tools.run(t, build, "openapi-typescript", document, "--output", filepath.Join(build, "petstore.ts")); err != nil {
			t.Fatalf("openapi-typescript: %v\n%s\n%s", err, stdout, stderr)
		}
		if stdout, stderr, err := tools.run(t, build, "tsc", "--project", filepath.Join(build, "tsconfig.json")); err != nil {
			t.Fatalf("tsc: %v\n%s\n%s", err, stdout, stderr)
		}
		cmd := exec.CommandContext(t.Context(), "node", filepath.Join(build, "live.mjs"))
		cmd.Env = append(tools.env, "PETSTORE_URL="+url, "PETSTORE_KEY="+contractToolsKey)
		out, err := cmd.CombinedOutput()
		if err != nil || !regexp.MustCompile(`(?m)^typescript live test: [1-9][0-9]* checks passed$`).Match(out) {
			t.Fatalf("the live test: %v\n%s", err, out)
		}
		t.Logf("%s", bytes.TrimSpace(out))
	})
}

// newmanReport is what TestContractTools reads of newman's JSON report.
type newmanReport struct {
	Run struct {
		Stats struct {
			Requests   struct{ Total, Failed int }
			Assertions struct{ Total, Failed int }
		}
		Executions []struct {
			Item     struct{ Name string }
			Response struct{ Code int }
		}
	}
}

// answers lists each request newman sent as "operationId status", the
// operation found by the summary that names Portman's item ("Add a pet" or,
// for a variation, "Add a pet[WrongKey]").
func (r newmanReport) answers(t *testing.T, ex documentExamples) []string {
	t.Helper()
	bySummary := map[string]string{}
	for _, item := range ex.doc.Paths.Map() {
		for _, op := range item.Operations() {
			bySummary[op.Summary] = op.OperationID
		}
	}
	var out []string
	for _, e := range r.Run.Executions {
		summary, _, _ := strings.Cut(e.Item.Name, "[")
		out = append(out, fmt.Sprintf("%s %d", bySummary[summary], e.Response.Code))
	}
	slices.Sort(out)
	return out
}

// portmanRequests lists the requests Portman's collection must hold, as
// "operationId status": every operation's example request, answered with
// its 2xx, and the variations contract/portman-config.json asks for.
func portmanRequests(t *testing.T, ex documentExamples, dir string) []string {
	t.Helper()
	b, err := os.ReadFile(filepath.Join(dir, "portman-config.json"))
	if err != nil {
		t.Fatal(err)
	}
	var config struct {
		Tests struct {
			VariationTests []struct {
				OpenAPIOperation     string   `json:"openApiOperation"`
				OpenAPIOperationID   string   `json:"openApiOperationId"`
				OpenAPIOperationIDs  []string `json:"openApiOperationIds"`
				ExcludeForOperations []string `json:"excludeForOperations"`
				OpenAPIResponse      string   `json:"openApiResponse"`
				Variations           []any
			} `json:"variationTests"`
		}
	}
	if err := json.Unmarshal(b, &config); err != nil {
		t.Fatalf("portman-config.json: %v", err)
	}
	var all, out []string
	documented := map[string]bool{}
	for _, item := range ex.doc.Paths.Map() {
		for _, op := range item.Operations() {
			all = append(all, op.OperationID)
			for status := range op.Responses.Map() {
				documented[op.OperationID+" "+status] = true
				if strings.HasPrefix(status, "2") {
					out = append(out, op.OperationID+" "+status)
				}
			}
		}
	}
	for _, v := range config.Tests.VariationTests {
		targets := append(v.OpenAPIOperationIDs, v.OpenAPIOperationID)
		if v.OpenAPIOperation == "*::/*" {
			targets = all
		}
		for _, id := range targets {
			// Portman makes a variation only for a documented status.
			if id != "" && !slices.Contains(v.ExcludeForOperations, id) && documented[id+" "+v.OpenAPIResponse] {
				for range v.Variations {
					out = append(out, id+" "+v.OpenAPIResponse)
				}
			}
		}
	}
	slices.Sort(out)
	return out
}
