package main

import (
	"bytes"
	"strings"
	"testing"
)

func TestLint(t *testing.T) {
	cases := []struct {
		name, exposition string
		code             int
		out              string
	}{
		{"clean", "# HELP nezha_runtime_operations_total Collectives run.\n# TYPE nezha_runtime_operations_total counter\n" +
			"nezha_runtime_operations_total{job=\"j\",rank=\"0\"} 3\n", 0, ""},
		{"counter without _total", "# HELP nezha_ops Collectives run.\n# TYPE nezha_ops counter\nnezha_ops 3\n", 1,
			"nezha_ops: counter metrics should have \"_total\" suffix\n"},
		{"no HELP", "# TYPE nezha_up gauge\nnezha_up 1\n", 1, "nezha_up: no help text\n"},
		{"milliseconds instead of base units", "# HELP nezha_stall_milliseconds Stall.\n# TYPE nezha_stall_milliseconds gauge\nnezha_stall_milliseconds 3\n", 1,
			"nezha_stall_milliseconds: use base unit \"seconds\" instead of \"milliseconds\"\n"},
		{"garbage", "this is not { an exposition\n", 2, ""},
		{"empty", "", 2, ""},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			var out, errOut bytes.Buffer
			code := run(nil, strings.NewReader(tc.exposition), &out, &errOut)
			if code != tc.code || out.String() != tc.out {
				t.Errorf("exit %d, stdout %q (stderr %q); want %d, %q", code, out.String(), errOut.String(), tc.code, tc.out)
			}
		})
	}
}
