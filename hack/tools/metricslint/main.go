// Command metricslint checks a Prometheus text exposition (what GET /metrics returns) the way
// `promtool check metrics` does: it runs promlint, the linter promtool itself calls, from
// client_golang's testutil/promlint. Building promtool means building most of Prometheus; the
// library is already a dependency of the operator and the agent, so the check costs nothing.
//
//	metricslint [FILE]      lint FILE (no FILE or "-": standard input)
//
// Every problem is printed as "metric: text"; the exit status is 1 if there was any, 2 on a read
// or parse error.
package main

import (
	"bytes"
	"flag"
	"fmt"
	"io"
	"os"

	"github.com/prometheus/client_golang/prometheus/testutil/promlint"
)

func main() {
	os.Exit(run(os.Args[1:], os.Stdin, os.Stdout, os.Stderr))
}

func run(args []string, stdin io.Reader, stdout, stderr io.Writer) int {
	fs := flag.NewFlagSet("metricslint", flag.ContinueOnError)
	fs.SetOutput(stderr)
	fs.Usage = func() {
		fmt.Fprintln(stderr, "usage: metricslint [FILE]   (promtool check metrics' checks; no FILE or - = stdin)")
	}
	if err := fs.Parse(args); err != nil {
		return 2
	}
	if fs.NArg() > 1 {
		fs.Usage()
		return 2
	}
	in := stdin
	if name := fs.Arg(0); name != "" && name != "-" {
		f, err := os.Open(name)
		if err != nil {
			fmt.Fprintf(stderr, "metricslint: %v\n", err)
			return 2
		}
		defer f.Close()
		in = f
	}
	problems, err := Lint(in)
	if err != nil {
		fmt.Fprintf(stderr, "metricslint: %v\n", err)
		return 2
	}
	for _, p := range problems {
		fmt.Fprintf(stdout, "%s: %s\n", p.Metric, p.Text)
	}
	if len(problems) > 0 {
		return 1
	}
	return 0
}

// Lint parses an exposition and returns promlint's problems (an empty exposition is an error:
// an endpoint that serves nothing is not a passing one).
func Lint(r io.Reader) ([]promlint.Problem, error) {
	data, err := io.ReadAll(r)
	if err != nil {
		return nil, err
	}
	if len(data) == 0 {
		return nil, fmt.Errorf("empty exposition")
	}
	problems, err := promlint.New(bytes.NewReader(data)).Lint()
	if err != nil {
		return nil, fmt.Errorf("not a Prometheus text exposition: %w", err)
	}
	return problems, nil
}
