// Package chart draws a line-and-point chart into a PNG file with the
// standard library's image packages and golang.org/x/image's fixed-size
// font: axes with round ticks and a light grid, a title, axis labels,
// series drawn as lines, dots or dashes, vertical marks across the whole
// y range (an instant, such as a kill), and a legend inside the axes'
// lower right or in a column of its own right of them. It is how the
// product draws its charts (`dssp up`'s accuracy.png and clocks.png,
// node/launch) without a plotting library; the lab's benchmarks keep
// gonum.org/v1/plot for theirs.
//
// It is a leaf: it knows no run, node or mesh, only numbers, names and
// colours; the caller says what to draw. A [Chart] is a plain value and
// [Chart.WritePNG] reads it and writes one file, so calls share nothing
// and may run concurrently. Points that are not finite are skipped, never
// drawn; a chart without points still has its axes (x and y over [0, 1]).
// Nothing is clipped by panic: what falls outside the axes is not drawn.
package chart
