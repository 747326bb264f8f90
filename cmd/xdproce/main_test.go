package main

import (
	"regexp"
	"slices"
	"strings"
	"testing"
)

// subcommands is every command `xdproce help` must list, with a flag each
// takes (or "" for none of its own).
var subcommands = []struct{ name, flag string }{
	{"bench", "-quick"},
	{"devinfo", "-probe"},
	{"down", "-timeout"},
	{"impair", "-drop"},
	{"list", "-dev"},
	{"perf", "-report_gbits"}, // the tools' options, listed in perf's help
	{"run", "-dev"},
	{"spoof", "-victim-mac"},
	{"stats", "-watch"},
	{"up", "-log-level"},
	{"version", ""},
}

// xdproce --help, -h and help list every command, one line each, on
// stdout, and exit 0; without a command the list is a usage error.
func TestHelpListsCommands(t *testing.T) {
	for _, args := range [][]string{{"--help"}, {"-h"}, {"help"}} {
		var out, errOut strings.Builder
		if code := run(t.Context(), args, &out, &errOut); code != 0 || errOut.Len() != 0 {
			t.Errorf("%q: exit %d, stderr %q; want 0 and nothing", args, code, errOut.String())
		}
		var listed []string
		for _, m := range regexp.MustCompile(`(?m)^  ([a-z]+) +\S.*$`).FindAllStringSubmatch(out.String(), -1) {
			listed = append(listed, m[1])
		}
		var want []string
		for _, c := range subcommands {
			want = append(want, c.name)
		}
		if !slices.Equal(listed, want) {
			t.Errorf("%q lists %q; want %q\n%s", args, listed, want, out.String())
		}
	}
	var out, errOut strings.Builder
	if code := run(t.Context(), nil, &out, &errOut); code != 2 || out.Len() != 0 || !strings.Contains(errOut.String(), "  version ") {
		t.Errorf("no command: exit %d, stdout %q, stderr %q; want 2 and the list on stderr", code, out.String(), errOut.String())
	}
}

// xdproce CMD --help, -h and xdproce help CMD print CMD's usage and flags
// on stdout, the same each way, and exit 0.
func TestCommandHelp(t *testing.T) {
	for _, c := range subcommands {
		var first string
		for _, args := range [][]string{{c.name, "--help"}, {c.name, "-h"}, {"help", c.name}} {
			var out, errOut strings.Builder
			if code := run(t.Context(), args, &out, &errOut); code != 0 || errOut.Len() != 0 {
				t.Errorf("%q: exit %d, stderr %q; want 0 and nothing", args, code, errOut.String())
				continue
			}
			help := out.String()
			if !strings.HasPrefix(help, "usage: xdproce "+c.name) ||
				c.flag != "" && !regexp.MustCompile(`(?m)^  `+regexp.QuoteMeta(c.flag)+`\s`).MatchString(help) {
				t.Errorf("%q: help %q lacks its usage or %s", args, help, c.flag)
			}
			if first == "" {
				first = help
			} else if help != first {
				t.Errorf("%q: help differs from %s --help's:\n%s\n---\n%s", args, c.name, help, first)
			}
		}
	}
	var out, errOut strings.Builder
	if code := run(t.Context(), []string{"help", "nope"}, &out, &errOut); code != 2 || !strings.Contains(errOut.String(), `unknown command "nope"`) {
		t.Errorf("help nope: exit %d, stderr %q; want 2 and unknown command", code, errOut.String())
	}
}

// A flag a command does not have is a usage error: exit 2, the usage on
// stderr, nothing on stdout.
func TestCommandBadFlag(t *testing.T) {
	for _, c := range subcommands {
		var out, errOut strings.Builder
		if code := run(t.Context(), []string{c.name, "--no-such-flag-xdproce"}, &out, &errOut); code != 2 || out.Len() != 0 ||
			!strings.Contains(errOut.String(), "flag provided but not defined: -no-such-flag-xdproce") ||
			!strings.Contains(errOut.String(), "\nusage: xdproce "+c.name) {
			t.Errorf("%s --no-such-flag-xdproce: exit %d, stdout %q, stderr %q; want 2, the error and the usage on stderr",
				c.name, code, out.String(), errOut.String())
		}
	}
}

// After perf's TOOL and after run's --, --help is the tool's.
func TestHelpPassesThrough(t *testing.T) {
	var perfHelp strings.Builder
	run(t.Context(), []string{"perf", "--help"}, &perfHelp, &strings.Builder{})
	for _, c := range []struct {
		args []string
		want string
	}{
		{[]string{"perf", "ib_write_bw", "--help"}, perfHelp.String()},
		{[]string{"perf", "ib_read_lat", "-d", "x", "-h"}, perfHelp.String()},
		{[]string{"perf", "ibv_rc_pingpong", "--help"}, "usage: xdproce perf ibv_rc_pingpong -d IFACE -g GIDX [options] [SERVER]\n"},
	} {
		var out, errOut strings.Builder
		if code := run(t.Context(), c.args, &out, &errOut); code != 0 || !strings.HasPrefix(out.String(), c.want) {
			t.Errorf("%q: exit %d, stdout %q, stderr %q; want 0 and %q", c.args, code, out.String(), errOut.String(), c.want)
		}
	}

	fakeLibDir(t)
	rn := fakeDaemons(serving("eth0"), "/nonexistent/xdproce")
	var out, errOut strings.Builder
	if code := runWith(t.Context(), []string{"run", "--", "sh", "-c", `echo "$@"`, "sh", "--help", "-h"}, &out, &errOut, rn); code != 0 ||
		out.String() != "--help -h\n" {
		t.Errorf("run -- sh ... --help -h: exit %d, stdout %q, stderr %q; want 0 and CMD given --help -h", code, out.String(), errOut.String())
	}
}
