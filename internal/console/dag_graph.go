package console

import (
	"fmt"

	"github.com/simple-workflow/simple-workflow/internal/engine"
)

// Geometry of a DAG's drawing, in SVG user units.
const (
	nodeWidth  = 190
	nodeHeight = 46
	colGap     = 60
	rowGap     = 18
	margin     = 10
)

// dagNode is one step of a DAG, placed: its column is one more than the
// deepest step it depends on.
type dagNode struct {
	engine.DAGStep
	X, Y int
	// State is the step's status, or "waiting" before it started.
	State string
	// Elements is "done/total elements" of a step that fans out.
	Elements string
}

// dagEdge joins a step to one it depends on.
type dagEdge struct{ X1, Y1, X2, Y2 int }

// dagGraph is a DAG laid out for drawing.
type dagGraph struct {
	Nodes         []dagNode
	Edges         []dagEdge
	Width, Height int
}

// layoutDAG places the steps of a DAG run in columns by depth, in
// definition order within a column, the final step alone after the rest. The database refused cycles and unknown
// dependencies when the definition was stored; a dependency it cannot find
// here is drawn without its edge rather than trusted.
func layoutDAG(steps []engine.DAGStep) *dagGraph {
	byName := make(map[string]int, len(steps))
	for i, s := range steps {
		byName[s.Name] = i
	}
	depth := make([]int, len(steps))
	// Relax depths; a definition has at most engine.MaxDAGSteps steps, and
	// the bound on passes keeps a malformed one from looping.
	for pass := 0; pass < len(steps); pass++ {
		changed := false
		for i, s := range steps {
			for _, d := range s.DependsOn {
				if j, ok := byName[d]; ok && depth[j]+1 > depth[i] && depth[j]+1 <= len(steps) {
					depth[i], changed = depth[j]+1, true
				}
			}
		}
		if !changed {
			break
		}
	}
	// The final step runs after all the others: it gets a column of its
	// own, after the deepest.
	last := 0
	for i, s := range steps {
		if !s.Final {
			last = max(last, depth[i])
		}
	}
	for i, s := range steps {
		if s.Final {
			depth[i] = last + 1
		}
	}
	g := &dagGraph{}
	rows := map[int]int{}
	nodes := make([]dagNode, len(steps))
	for i, s := range steps {
		col := depth[i]
		row := rows[col]
		rows[col]++
		state := s.Status
		if state == "" {
			state = "waiting"
		}
		nodes[i] = dagNode{DAGStep: s, State: state,
			X: margin + col*(nodeWidth+colGap), Y: margin + row*(nodeHeight+rowGap)}
		if s.Elements != nil && s.ElementsDone != nil {
			nodes[i].Elements = fmt.Sprintf("%d/%d elements", *s.ElementsDone, *s.Elements)
		}
		g.Width = max(g.Width, nodes[i].X+nodeWidth+margin)
		g.Height = max(g.Height, nodes[i].Y+nodeHeight+margin)
	}
	for i, s := range steps {
		for _, d := range s.DependsOn {
			if j, ok := byName[d]; ok {
				g.Edges = append(g.Edges, dagEdge{
					X1: nodes[j].X + nodeWidth, Y1: nodes[j].Y + nodeHeight/2,
					X2: nodes[i].X, Y2: nodes[i].Y + nodeHeight/2,
				})
			}
		}
	}
	g.Nodes = nodes
	return g
}
