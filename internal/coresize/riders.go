package main

import (
	"fmt"
	"go/ast"
	"go/importer"
	"go/parser"
	"go/token"
	"go/types"
	"path/filepath"
	"slices"
	"sort"
	"strings"
	"sync"
)

// A rider is an optional mechanism that rides on the round trip: its
// fields of core.Attempt (Riders) and core.Reply (RiderReply), named as
// "Type.Field", may be read or written only in its own files (paths from
// the module root). A field reached through an embedded one counts for
// each step of the path, so Riders.Placement covers its Place, Claims,
// Caps and Again. "Type.*" names every field of a type: a concern type of
// the root that owns its fields (changed only through its methods) is held
// to its files the same way.
type rider struct {
	name   string
	fields []string
	files  []string
}

// riders is the table the check holds the library to.
var riders = []rider{
	{"loss probes and heal", []string{"Riders.Loss", "RiderReply.Gone", "RiderReply.NoMark", "RiderReply.Tally", "RiderReply.Tallied"},
		[]string{"heal.go", "health.go", "internal/redisstore/probes.go"}},
	{"published margin", []string{"Riders.Margin", "RiderReply.Wide", "RiderReply.WideEnd"},
		[]string{"margin.go", "internal/core/margin.go", "internal/redisstore/margin.go"}},
	{"places in flight", []string{"Riders.Places", "RiderReply.LeaseGranted", "RiderReply.LeaseEarliest"},
		[]string{"inflight.go", "internal/redisstore/leases.go"}},
	{"announcements of taken slots", []string{"Riders.Taken"},
		[]string{"news.go", "internal/redisstore/announce.go"}},
	{"placement by the store", []string{"Riders.Placement", "RiderReply.Placed"},
		[]string{"place.go", "internal/core/place.go", "internal/redisstore/place.go"}},
	{"tenants' shares", []string{"Riders.Tenants", "RiderReply.Tenants", "RiderReply.LightPeak", "RiderReply.Caps"},
		[]string{"tenants.go", "internal/core/tenants.go", "internal/redisstore/tenants.go"}},
	{"what is owed to Redis (a concern type)", []string{"owed.*"}, []string{"owed.go"}},
}

// riderPackages are the packages whose files the check reads (not their
// tests), from the module root.
var riderPackages = []string{".", "internal/core", "internal/redisstore"}

// strayRiders type-checks the library's packages under root and returns
// every place, as "file:line: field (rider)", where a rider's field is
// selected, or set in a composite literal, outside the rider's files.
func strayRiders(root string, table []rider) ([]string, error) {
	owner := map[string]rider{}
	for _, r := range table {
		for _, f := range r.fields {
			owner[f] = r
		}
	}
	var stray []string
	for _, dir := range riderPackages {
		fset, files, info, err := typeCheck(filepath.Join(root, dir))
		if err != nil {
			return nil, err
		}
		note := func(pos token.Pos, field string) {
			typ, _, _ := strings.Cut(field, ".")
			r, ok := owner[field]
			if !ok {
				if r, ok = owner[typ+".*"]; !ok {
					return
				}
			}
			p := fset.Position(pos)
			rel, _ := filepath.Rel(root, p.Filename)
			if !slices.Contains(r.files, filepath.ToSlash(rel)) {
				stray = append(stray, fmt.Sprintf("%s:%d: %s (%s)", filepath.ToSlash(rel), p.Line, field, r.name))
			}
		}
		for sel, s := range info.Selections {
			if s.Kind() == types.FieldVal {
				fieldPath(s, func(field string) { note(sel.Sel.Pos(), field) })
			}
		}
		for _, f := range files {
			ast.Inspect(f, func(n ast.Node) bool {
				if cl, ok := n.(*ast.CompositeLit); ok {
					literalKeys(cl, info, note)
				}
				return true
			})
		}
	}
	sort.Strings(stray)
	return stray, nil
}

// typeCheck parses and type-checks the non-test files of the package in
// dir, once per process: each check reads the library's packages, and
// type-checking one from source, with what it imports, took about 4s (12s
// under the race detector) each time. The results share one file set and
// one importer, and are only read after.
func typeCheck(dir string) (*token.FileSet, []*ast.File, *types.Info, error) {
	checked.mu.Lock()
	defer checked.mu.Unlock()
	if checked.fset == nil {
		checked.fset = token.NewFileSet()
		checked.imp = importer.ForCompiler(checked.fset, "source", nil)
		checked.pkgs = map[string]checkedPackage{}
	}
	dir = filepath.Clean(dir)
	if p, ok := checked.pkgs[dir]; ok {
		return checked.fset, p.files, p.info, p.err
	}
	files, info, err := parseAndCheck(checked.fset, checked.imp, dir)
	checked.pkgs[dir] = checkedPackage{files, info, err}
	return checked.fset, files, info, err
}

// checked holds what typeCheck has checked, by directory.
var checked struct {
	mu   sync.Mutex
	fset *token.FileSet
	imp  types.Importer
	pkgs map[string]checkedPackage
}

type checkedPackage struct {
	files []*ast.File
	info  *types.Info
	err   error
}

func parseAndCheck(fset *token.FileSet, imp types.Importer, dir string) ([]*ast.File, *types.Info, error) {
	paths, err := filepath.Glob(filepath.Join(dir, "*.go"))
	if err != nil {
		return nil, nil, err
	}
	var files []*ast.File
	for _, p := range paths {
		if strings.HasSuffix(p, "_test.go") {
			continue
		}
		f, err := parser.ParseFile(fset, p, nil, 0)
		if err != nil {
			return nil, nil, err
		}
		files = append(files, f)
	}
	info := &types.Info{Selections: map[*ast.SelectorExpr]*types.Selection{}, Types: map[ast.Expr]types.TypeAndValue{}, Uses: map[*ast.Ident]types.Object{}}
	conf := types.Config{Importer: imp}
	if _, err := conf.Check(dir, fset, files, info); err != nil {
		return nil, nil, err
	}
	return files, info, nil
}

// fieldPath calls each with "Type.Field" for every step of the field
// selection s, embedded fields included.
func fieldPath(s *types.Selection, each func(string)) {
	t := s.Recv()
	for _, i := range s.Index() {
		if p, ok := t.(*types.Pointer); ok {
			t = p.Elem()
		}
		st, ok := t.Underlying().(*types.Struct)
		if !ok {
			return
		}
		f := st.Field(i)
		if n, ok := t.(*types.Named); ok {
			each(n.Obj().Name() + "." + f.Name())
		}
		t = f.Type()
	}
}

// literalKeys calls note with "Type.Field" for each keyed field of the
// struct literal cl.
func literalKeys(cl *ast.CompositeLit, info *types.Info, note func(token.Pos, string)) {
	t := info.Types[cl].Type
	if p, ok := t.(*types.Pointer); ok {
		t = p.Elem()
	}
	n, ok := t.(*types.Named)
	if !ok {
		return
	}
	for _, e := range cl.Elts {
		if kv, ok := e.(*ast.KeyValueExpr); ok {
			if id, ok := kv.Key.(*ast.Ident); ok {
				note(id.Pos(), n.Obj().Name()+"."+id.Name)
			}
		}
	}
}
