package docstest

import (
	"bufio"
	"fmt"
	"maps"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"slices"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"
	"unicode"

	"github.com/onceq/onceq/dedup/oncetest/redistest"
	"github.com/onceq/onceq/internal/testenv"
	"github.com/onceq/onceq/pgledger/pgtest"
)

func TestMain(m *testing.M) {
	code := redistest.Main(m)
	if binDir != "" {
		os.RemoveAll(binDir)
	}
	os.Exit(code)
}

// Every shell example of README.md and docs/ runs, in the order a reader
// meets it, each page on a Redis of its own, from the repository's root,
// and prints what the page says (README.md's index of docs/ is the order).
func TestPagesRun(t *testing.T) {
	root := repoRoot(t)
	pages := append([]string{"README.md"}, docsOrder(t, root)...)
	for _, page := range pages {
		t.Run(page, func(t *testing.T) {
			runPage(t, root, page)
		})
	}
}

// Only console blocks hold shell examples: a sh or bash block would be an
// example no test runs.
func TestNoUnrunShellBlocks(t *testing.T) {
	root := repoRoot(t)
	for _, page := range append([]string{"README.md"}, docsOrder(t, root)...) {
		b, err := os.ReadFile(filepath.Join(root, page))
		if err != nil {
			t.Fatal(err)
		}
		for i, line := range strings.Split(string(b), "\n") {
			if f := strings.TrimSpace(line); f == "```sh" || f == "```bash" || f == "```shell" || f == "```zsh" {
				t.Errorf("%s:%d: a %s block; shell examples are console blocks, which TestPagesRun runs", page, i+1, f)
			}
		}
	}
}

// docsOrder is docs/*.md in the order README.md links them, then any it
// does not link (an unlinked page is still run).
func docsOrder(t *testing.T, root string) []string {
	t.Helper()
	readme, err := os.ReadFile(filepath.Join(root, "README.md"))
	if err != nil {
		t.Fatal(err)
	}
	var out []string
	seen := map[string]bool{}
	for _, m := range regexp.MustCompile(`\(docs/([a-z0-9-]+\.md)`).FindAllStringSubmatch(string(readme), -1) {
		if p := "docs/" + m[1]; !seen[p] {
			seen[p] = true
			out = append(out, p)
		}
	}
	all, _ := filepath.Glob(filepath.Join(root, "docs", "*.md"))
	for _, p := range all {
		rel := "docs/" + filepath.Base(p)
		if !seen[rel] {
			seen[rel] = true
			out = append(out, rel)
		}
	}
	return out
}

func repoRoot(t *testing.T) string {
	t.Helper()
	root, err := testenv.RepoRoot()
	if err != nil {
		t.Fatal(err)
	}
	return root
}

// command is one "$ " line of a console block (with its continuation
// lines) and the output the page shows under it.
type command struct {
	line int // in the page
	text string
	want []string
	exit int
	bg   bool // ends in '&': runs in the background, its output unchecked
}

var exitNote = regexp.MustCompile(`\s+#\s*exit (\d+)\s*$`)

// parse reads the console blocks of a page.
func parse(page string, b []byte) []command {
	var cmds []command
	in := false
	var cur *command
	sc := bufio.NewScanner(strings.NewReader(string(b)))
	sc.Buffer(make([]byte, 1<<20), 1<<20)
	n := 0
	cont := false
	for sc.Scan() {
		n++
		line := sc.Text()
		switch {
		case !in && strings.TrimSpace(line) == "```console":
			in, cur = true, nil
			continue
		case in && strings.TrimSpace(line) == "```":
			in, cur = false, nil
			continue
		case !in:
			continue
		}
		switch {
		case cont:
			cur.text += "\n" + line
			cont = strings.HasSuffix(line, "\\")
		case strings.HasPrefix(line, "$ "):
			cmds = append(cmds, command{line: n, text: strings.TrimPrefix(line, "$ ")})
			cur = &cmds[len(cmds)-1]
			cont = strings.HasSuffix(line, "\\")
		case cur != nil:
			cur.want = append(cur.want, line)
		}
		if cur != nil && !cont {
			if m := exitNote.FindStringSubmatch(cur.text); m != nil {
				cur.exit, _ = strconv.Atoi(m[1])
				cur.text = strings.TrimSuffix(cur.text, m[0])
			}
			if t := strings.TrimSpace(cur.text); strings.HasSuffix(t, "&") && !strings.HasSuffix(t, "&&") {
				cur.bg, cur.text = true, strings.TrimSuffix(t, "&")
			}
		}
	}
	return cmds
}

// documentedPorts are the ports the pages name (the worker's admin port,
// the API's and a second and third API's, stripe-mock's, Mailpit's): each run takes free ones in their
// place, in the commands and in the output the page shows.
var documentedPorts = []string{"8080", "8081", "8082", "8083", "12111", "12112", "1025", "8025"}

// notRun says why a command is checked rather than run: the README's test
// command is what .ci/run runs (running it here would run this test
// again), and a go install is what .ci/run installed.
func notRun(t *testing.T, root, cmd string) (string, bool) {
	ci, err := os.ReadFile(filepath.Join(root, ".ci", "run"))
	if err != nil {
		t.Fatal(err)
	}
	peers, err := os.ReadFile(filepath.Join(root, "internal", "peertest", "peertest.go"))
	if err != nil {
		t.Fatal(err)
	}
	switch {
	case strings.HasPrefix(cmd, "go test "):
		if !strings.Contains(string(ci), "\n"+cmd+"\n") {
			return fmt.Sprintf("%q is not the test command .ci/run runs", cmd), true
		}
		return "", true
	case strings.HasPrefix(cmd, "go install "):
		mod, version, _ := strings.Cut(strings.TrimPrefix(cmd, "go install "), "@")
		if !strings.Contains(string(ci), cmd) && !(strings.Contains(string(ci), mod) && strings.Contains(string(peers), `"`+version+`"`)) {
			return fmt.Sprintf("%q is not what .ci/run installs", cmd), true
		}
		return "", true
	}
	return "", false
}

// runPage runs a page's commands in one bash, so variables and the
// background worker carry from one to the next, and compares each
// command's output (stdout and stderr) and exit code with the page's.
func runPage(t *testing.T, root, page string) {
	b, err := os.ReadFile(filepath.Join(root, page))
	if err != nil {
		t.Fatal(err)
	}
	cmds := parse(page, b)
	if len(cmds) == 0 {
		return
	}
	srv := redistest.Start(t)
	work := t.TempDir()
	var pairs []string
	free := map[string]string{}
	for _, p := range documentedPorts {
		free[p] = strconv.Itoa(testenv.FreePort(t))
		pairs = append(pairs, "localhost:"+p, "localhost:"+free[p], "127.0.0.1:"+p, "127.0.0.1:"+free[p])
	}
	ports := strings.NewReplacer(pairs...)

	var script strings.Builder
	// Job control: each background command is a process group of its own,
	// ended whole (go run and the daemon it started alike).
	script.WriteString("set +e -m\ncd " + shellQuote(root) + "\n")
	for i, c := range cmds {
		out := filepath.Join(work, fmt.Sprintf("%d.out", i))
		if msg, skip := notRun(t, root, c.text); skip {
			if msg != "" {
				t.Errorf("%s:%d: %s", page, c.line, msg)
			}
			cmds[i].bg = true // nothing to compare
			continue
		}
		if c.bg {
			fmt.Fprintf(&script, "{ %s\n} >%s 2>&1 </dev/null &\necho $! >>%s\n", ports.Replace(c.text), shellQuote(out), shellQuote(filepath.Join(work, "pids")))
			continue
		}
		fmt.Fprintf(&script, "{ %s\n} >%s 2>&1 </dev/null\necho $? >%s\n", ports.Replace(c.text), shellQuote(out), shellQuote(out+".code"))
	}
	// Background processes end with the page: SIGTERM, as a reader's ^C.
	fmt.Fprintf(&script, "for p in $(cat %s 2>/dev/null); do kill -TERM -- -$p 2>/dev/null; done\nwait\n", shellQuote(filepath.Join(work, "pids")))
	path := filepath.Join(work, "page.sh")
	if err := os.WriteFile(path, []byte(script.String()), 0o600); err != nil {
		t.Fatal(err)
	}
	bash := exec.Command("bash", path)
	bash.Env = pageEnv(t, srv.Addr, free, work, string(b))
	done := make(chan error, 1)
	start := time.Now()
	if err := bash.Start(); err != nil {
		t.Fatal(err)
	}
	go func() { done <- bash.Wait() }()
	select {
	case err := <-done:
		if err != nil {
			t.Fatalf("%s: bash: %v", page, err)
		}
	case <-time.After(10 * time.Minute):
		bash.Process.Kill()
		t.Fatalf("%s: did not finish in 10 minutes", page)
	}
	t.Logf("%s: %d commands in %s", page, len(cmds), time.Since(start).Round(time.Millisecond))
	failed := false
	defer func() {
		if !failed {
			return
		}
		for i, c := range cmds {
			if c.bg {
				out, _ := os.ReadFile(filepath.Join(work, fmt.Sprintf("%d.out", i)))
				t.Logf("%s:%d: background $ %s said:\n%s", page, c.line, c.text, out)
			}
		}
	}()
	for i, c := range cmds {
		if c.bg {
			continue
		}
		out := filepath.Join(work, fmt.Sprintf("%d.out", i))
		got, _ := os.ReadFile(out)
		codeText, _ := os.ReadFile(out + ".code")
		code, _ := strconv.Atoi(strings.TrimSpace(string(codeText)))
		gotLines := lines(ports.Replace(string(got)))
		if code != c.exit {
			failed = true
			t.Errorf("%s:%d: $ %s\nexit %d, the page says %d; output:\n%s", page, c.line, c.text, code, c.exit, got)
			continue
		}
		if msg := match(c.want, gotLines, ports); msg != "" {
			failed = true
			t.Errorf("%s:%d: $ %s\n%s\ngot:\n%s\nthe page says:\n%s", page, c.line, c.text, msg, strings.Join(gotLines, "\n"), strings.Join(c.want, "\n"))
		}
	}
}

// pageEnv is the environment a page runs in: a shell's, with the Redis,
// ports and directories of this run, and the daemons built from this tree
// first on PATH. A page that uses $ONCEQ_POSTGRES_URL gets a throwaway
// database there.
func pageEnv(t *testing.T, redisAddr string, free map[string]string, work, page string) []string {
	env := map[string]string{
		"ONCEQ_REDIS_URL":  "redis://" + redisAddr,
		"ONCEQ_ADMIN_ADDR": "127.0.0.1:" + free["8080"],
		"ONCEQ_API_ADDR":   "127.0.0.1:" + free["8081"],
		"ONCEQ_OUTBOX_DIR": filepath.Join(work, "outbox"),
		"ONCEQ_SCAN_ROOT":  filepath.Join(work, "scan"),
		"ONCEQ_ENV":        "development",
		"PATH":             binaries(t) + string(os.PathListSeparator) + os.Getenv("PATH"),
	}
	if strings.Contains(page, "$ONCEQ_POSTGRES_URL") {
		env["ONCEQ_POSTGRES_URL"] = pgtest.New(t)
	}
	if err := os.MkdirAll(env["ONCEQ_SCAN_ROOT"], 0o755); err != nil {
		t.Fatal(err)
	}
	return testenv.ChildEnv(env)
}

var (
	buildOnce sync.Once
	binDir    string
	buildErr  error
)

// binaries builds the worker and the producer once per test process.
func binaries(t *testing.T) string {
	buildOnce.Do(func() {
		if binDir, buildErr = os.MkdirTemp("", "docstest-bin"); buildErr != nil {
			return
		}
		build := exec.Command("go", "build", "-o", binDir+string(filepath.Separator), "./cmd/worker", "./cmd/producer")
		build.Dir = repoRoot(t)
		if out, err := build.CombinedOutput(); err != nil {
			buildErr = fmt.Errorf("go build: %v\n%s", err, out)
		}
	})
	if buildErr != nil {
		t.Fatal(buildErr)
	}
	return binDir
}

func lines(s string) []string {
	s = strings.ReplaceAll(s, "\r\n", "\n") // HTTP headers, as curl -i prints them
	s = strings.TrimRight(s, "\n")
	if s == "" {
		return nil
	}
	return strings.Split(s, "\n")
}

// match says how got differs from want, "" when it matches: line by line,
// "…" standing for any run of characters; a last want line "…" alone lets
// more lines follow.
func match(want, got []string, ports *strings.Replacer) string {
	more := len(want) > 0 && strings.TrimSpace(want[len(want)-1]) == "…"
	if more {
		want = want[:len(want)-1]
	}
	if len(got) < len(want) || (!more && len(got) != len(want)) {
		return fmt.Sprintf("%d lines of output, the page shows %d", len(got), len(want))
	}
	for i, w := range want {
		if !lineMatch(ports.Replace(w), got[i]) {
			return fmt.Sprintf("line %d differs", i+1)
		}
	}
	return ""
}

func lineMatch(want, got string) bool {
	parts := strings.Split(want, "…")
	re := "^"
	for i, p := range parts {
		if i > 0 {
			re += ".*"
		}
		re += regexp.QuoteMeta(p)
	}
	return regexp.MustCompile(re + "$").MatchString(got)
}

func shellQuote(s string) string { return "'" + strings.ReplaceAll(s, "'", `'\''`) + "'" }

// Every relative link of README.md, CHANGELOG.md and docs/ names a file
// that exists, and a #fragment a heading of that page: a page or section
// moved or renamed leaves no dead link behind.
func TestLinksResolve(t *testing.T) {
	root := repoRoot(t)
	pages := append([]string{"README.md", "CHANGELOG.md"}, docsOrder(t, root)...)
	link := regexp.MustCompile(`\]\(([^)\s#]*)(#[^)\s]*)?\)`)
	for _, page := range pages {
		b, err := os.ReadFile(filepath.Join(root, page))
		if err != nil {
			t.Errorf("%s: %v", page, err)
			continue
		}
		for _, m := range link.FindAllStringSubmatch(string(b), -1) {
			target, fragment := m[1], strings.TrimPrefix(m[2], "#")
			if strings.Contains(target, "://") || strings.HasPrefix(target, "mailto:") {
				continue
			}
			path := filepath.Join(root, filepath.Dir(page), target)
			if target == "" {
				path = filepath.Join(root, page)
			}
			if _, err := os.Stat(path); err != nil {
				t.Errorf("%s: link to %s: %v", page, target, err)
				continue
			}
			if fragment != "" && strings.HasSuffix(path, ".md") && !headingAnchors(t, path)[fragment] {
				t.Errorf("%s: link to %s#%s: no such heading", page, target, fragment)
			}
		}
	}
}

// headingAnchors are the anchors GitHub gives a Markdown page's headings:
// lower case, spaces as hyphens, other punctuation dropped.
func headingAnchors(t *testing.T, path string) map[string]bool {
	b, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	anchors := map[string]bool{}
	fence := false
	for line := range strings.Lines(string(b)) {
		if strings.HasPrefix(line, "```") {
			fence = !fence
		}
		h, ok := strings.CutPrefix(strings.TrimRight(line, "\n"), "#")
		if fence || !ok {
			continue
		}
		h = strings.ToLower(strings.TrimSpace(strings.TrimLeft(h, "#")))
		var a strings.Builder
		for _, r := range h {
			switch {
			case r == ' ':
				a.WriteRune('-')
			case r == '-' || r == '_' || unicode.IsLetter(r) || unicode.IsDigit(r):
				a.WriteRune(r)
			}
		}
		anchors[a.String()] = true
	}
	return anchors
}

// Every problem type the code writes has its section in docs/problems.md,
// which its type URI links to, and is listed in the OpenAPI document; the
// page has no section for a type nothing writes.
func TestProblemTypesDocumented(t *testing.T) {
	root := repoRoot(t)
	code := map[string]bool{}
	for _, src := range []struct{ glob, re string }{
		{"internal/api/problem.go", `kind\{"([a-z-]+)"`},
		{"dedup/httpidem/*.go", `kind\w+\s*=\s*"([a-z-]+)"`},
		{"dedup/httpidem/*.go", `problem\(http\.Status\w+, "([a-z-]+)"`},
	} {
		files, _ := filepath.Glob(filepath.Join(root, src.glob))
		for _, f := range files {
			b, err := os.ReadFile(f)
			if err != nil {
				t.Fatal(err)
			}
			for _, m := range regexp.MustCompile(src.re).FindAllStringSubmatch(string(b), -1) {
				code[m[1]] = true
			}
		}
	}
	if len(code) < 20 {
		t.Fatalf("found only %d problem types in the code: %v", len(code), slices.Sorted(maps.Keys(code)))
	}
	documented := headingAnchors(t, filepath.Join(root, "docs", "problems.md"))
	delete(documented, "problem-types") // the page's title
	openapi, err := os.ReadFile(filepath.Join(root, "internal", "api", "openapi.json"))
	if err != nil {
		t.Fatal(err)
	}
	for slug := range code {
		if !documented[slug] {
			t.Errorf("problem type %s has no section in docs/problems.md", slug)
		}
		if !regexp.MustCompile(`[ :]` + slug + `[,.]`).Match(openapi) {
			t.Errorf("problem type %s is not listed in internal/api/openapi.json", slug)
		}
	}
	for slug := range documented {
		if !code[slug] {
			t.Errorf("docs/problems.md has a section %s that no code writes", slug)
		}
	}
}

// docs/layout.md's table names paths that exist, and every Go package
// directory of the three modules is under one of them.
func TestLayoutMatchesTheTree(t *testing.T) {
	root := repoRoot(t)
	b, err := os.ReadFile(filepath.Join(root, "docs", "layout.md"))
	if err != nil {
		t.Fatal(err)
	}
	var listed []string
	for _, line := range strings.Split(string(b), "\n") {
		first, _, ok := strings.Cut(strings.TrimPrefix(line, "| "), " | ")
		if !ok || !strings.HasPrefix(line, "| `") {
			continue
		}
		for _, m := range regexp.MustCompile("`([^`]+)`").FindAllStringSubmatch(first, -1) {
			p := strings.TrimSuffix(m[1], "/")
			if strings.Contains(p, " ") || strings.Contains(p, ".com") {
				continue // a module path, not a directory
			}
			if _, err := os.Stat(filepath.Join(root, p)); err != nil {
				t.Errorf("docs/layout.md names %s: %v", p, err)
			}
			listed = append(listed, p)
		}
	}
	list := exec.Command("go", "list", "-f", "{{.Dir}}", "./...", "./dedup/...", "./pgledger/...")
	list.Dir = root
	out, err := list.Output()
	if err != nil {
		t.Fatal(err)
	}
	for _, dir := range strings.Fields(string(out)) {
		rel, err := filepath.Rel(root, dir)
		if err != nil {
			t.Fatal(err)
		}
		// A module's own row covers its root package; its other packages
		// need rows of their own.
		covered := rel == "." || slices.ContainsFunc(listed, func(p string) bool {
			return rel == p || p != "dedup" && p != "pgledger" && strings.HasPrefix(rel, p+"/")
		})
		if !covered {
			t.Errorf("package directory %s is in no row of docs/layout.md", rel)
		}
	}
}
