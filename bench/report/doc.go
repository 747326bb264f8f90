// Package report is what a run of xdproce bench produces and how it is
// shown: the results (Result, one figure of one contender at one size,
// and the contenders, measures and operations they name), their JSON
// report, the tables of ratios against the AF_XDP floor and kernel TCP,
// the targets' lines, and the SVG plots. Package bench measures; this
// package only formats, so its tests need no network.
//
// bench moved these here from its result.go, table.go and plot.go with
// internal/tools/movedecl (test/layout/split/split.sh, issue 31).
package report
