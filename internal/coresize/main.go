// Command coresize prints the figures that say how much a reader must hold
// to change the library: per package, its line count (non-test Go
// files), the fields of its biggest structs, the types with the most
// methods and its longest functions; for the root, also the places that
// change a waiter's reservation; the places where a rider's fields are
// touched outside its own files (see riders.go); and the places where a
// concern type's fields change outside its own files (see owners.go).
//
// Run it from the module root, with the package directories to measure
// (the root and the library's own packages by default):
//
//	go run ./internal/coresize [dir...]
//
// With -walk, it measures instead the functions and files one uncontended
// Wait passes through, from the face to Redis and back (see walk.go):
//
//	go run ./internal/coresize -walk
//
// With -surface, it counts the exported API of each package directory
// (the root by default): package-level names, then with the methods of
// its types, then with the fields of its structs (see surface.go);
// -surface-list lists them too:
//
//	go run ./internal/coresize -surface [dir...]
package main

import (
	"fmt"
	"go/ast"
	"go/parser"
	"go/token"
	"os"
	"path/filepath"
	"sort"
	"strings"
)

// libraryDirs are the library's own packages: what a user's build
// compiles of this module, less the small helpers.
var libraryDirs = []string{".", "internal/core", "internal/redisstore", "counters"}

func main() {
	if len(os.Args) == 2 && os.Args[1] == "-walk" {
		if err := walkOneWait(); err != nil {
			fail(err)
		}
		return
	}
	if len(os.Args) >= 2 && (os.Args[1] == "-surface" || os.Args[1] == "-surface-list") {
		dirs := os.Args[2:]
		if len(dirs) == 0 {
			dirs = []string{"."}
		}
		for _, d := range dirs {
			if err := printSurface(d, os.Args[1] == "-surface-list"); err != nil {
				fail(err)
			}
		}
		return
	}
	dirs := os.Args[1:]
	if len(dirs) == 0 {
		dirs = libraryDirs
	}
	for _, d := range dirs {
		measure(d)
	}
	stray, err := strayRiders(".", riders)
	if err != nil {
		fail(err)
	}
	fmt.Printf("riders' fields touched outside their files (see riders.go): %d\n", len(stray))
	for _, s := range stray {
		fmt.Println("  " + s)
	}
	writes, err := strayWrites(".", owners)
	if err != nil {
		fail(err)
	}
	fmt.Printf("concern types' fields changed outside their files (see owners.go): %d\n", len(writes))
	for _, s := range writes {
		fmt.Println("  " + s)
	}
}

// fn is a function's name (Type.Method for a method) and its length in
// lines, from its signature to its closing brace.
type fn struct {
	name  string
	lines int
}

// size holds the figures of one package directory's non-test files.
type size struct {
	files, lines int
	code         int            // lines that are neither blank nor comments
	structs      map[string]int // struct type -> fields
	methods      map[string]int // type -> methods
	funcs        []fn           // longest first
	sites        map[string]int // function -> assignments to a waiter's reservation or presence
	states       int            // of which to its state (or its whole reservation)
	moves        map[string]int // function -> moves it makes (see isMove)
	fileLines    map[string]int // file name -> lines
}

// measure prints the figures of the package in dir.
func measure(dir string) {
	z, err := measureDir(dir)
	if err != nil {
		fail(err)
	}
	fmt.Printf("%s: %d lines (%d of code, without comments and blank lines) in %d files\n", dir, z.lines, z.code, z.files)
	fmt.Print("  biggest structs (fields):")
	for _, s := range ranked(z.structs, 5) {
		fmt.Printf(" %s,", s)
	}
	fmt.Print("\n  most methods:")
	for _, s := range ranked(z.methods, 5) {
		fmt.Printf(" %s,", s)
	}
	fmt.Print("\n  longest functions (lines):")
	for _, f := range z.funcs[:min(6, len(z.funcs))] {
		fmt.Printf(" %s %d,", f.name, f.lines)
	}
	fmt.Println()
	if len(z.sites) == 0 {
		return
	}
	total, fns, where := tally(z.sites)
	fmt.Printf("  places that change a waiter's reservation or presence (assignments to their fields): %d in %d functions, %d of them set its state (%s)\n",
		total, fns, z.states, where)
	total, fns, where = tally(z.moves)
	fmt.Printf("  moves of a waiter (calls of moveLocked and settleLocked): %d in %d functions (%s)\n", total, fns, where)
}

// measureDir measures the package in dir.
func measureDir(dir string) (size, error) {
	fset := token.NewFileSet()
	files, err := filepath.Glob(filepath.Join(dir, "*.go"))
	if err != nil {
		return size{}, err
	}
	z := size{structs: map[string]int{}, methods: map[string]int{}, sites: map[string]int{}, moves: map[string]int{}, fileLines: map[string]int{}}
	for _, f := range files {
		if strings.HasSuffix(f, "_test.go") {
			continue
		}
		src, err := os.ReadFile(f)
		if err != nil {
			return size{}, err
		}
		z.files++
		n := strings.Count(string(src), "\n")
		z.lines += n
		z.fileLines[filepath.Base(f)] = n
		for _, l := range strings.Split(string(src), "\n") {
			if l = strings.TrimSpace(l); l != "" && !strings.HasPrefix(l, "//") {
				z.code++
			}
		}
		file, err := parser.ParseFile(fset, f, src, 0)
		if err != nil {
			return size{}, err
		}
		ast.Inspect(file, func(n ast.Node) bool {
			switch n := n.(type) {
			case *ast.TypeSpec:
				if st, ok := n.Type.(*ast.StructType); ok {
					c := 0
					for _, fl := range st.Fields.List {
						c += max(1, len(fl.Names))
					}
					z.structs[n.Name.Name] = c
				}
			case *ast.FuncDecl:
				z.funcDecl(fset, n)
			}
			return true
		})
	}
	sort.Slice(z.funcs, func(i, j int) bool { return z.funcs[i].lines > z.funcs[j].lines })
	return z, nil
}

// funcDecl adds n's figures to z.
func (z *size) funcDecl(fset *token.FileSet, n *ast.FuncDecl) {
	name := n.Name.Name
	if n.Recv != nil && len(n.Recv.List) > 0 {
		z.methods[recv(n.Recv.List[0].Type)]++
		name = recv(n.Recv.List[0].Type) + "." + name
	}
	l := fset.Position(n.End()).Line - fset.Position(n.Pos()).Line + 1
	z.funcs = append(z.funcs, fn{name, l})
	ast.Inspect(n.Body, func(m ast.Node) bool {
		if call, ok := m.(*ast.CallExpr); ok && isMove(call) {
			z.moves[name]++
			return true
		}
		as, ok := m.(*ast.AssignStmt)
		if !ok {
			return true
		}
		for _, lhs := range as.Lhs {
			if isWaiterState(lhs) {
				z.sites[name]++
				if f := lhs.(*ast.SelectorExpr).Sel.Name; f == "state" || f == "res" {
					z.states++
				}
			}
		}
		return true
	})
}

// tally sums m (function -> count) and lists it, by function name.
func tally(m map[string]int) (total, fns int, where string) {
	var list []string
	for k, v := range m {
		total += v
		fns++
		list = append(list, fmt.Sprintf("%s %d", k, v))
	}
	sort.Strings(list)
	return total, fns, strings.Join(list, ", ")
}

// waiterFields are the fields that hold a waiter's reservation state,
// before and after the reservation became one value.
var waiterFields = map[string]bool{
	"state": true, "cancelled": true, "gone": true, "immediate": true,
	"at": true, "members": true, "stale": true, "epoch": true, "limitGen": true, "localAt": true, "shareAt": true, "err": true,
	"res": true, "left": true, "caller": true,
}

// isWaiterState reports whether e is w.<field> for a waiter field above,
// assigned through a variable named w or x (the names the core uses).
func isWaiterState(e ast.Expr) bool {
	sel, ok := e.(*ast.SelectorExpr)
	if !ok || !waiterFields[sel.Sel.Name] {
		return false
	}
	id, ok := sel.X.(*ast.Ident)
	return ok && (id.Name == "w" || id.Name == "x")
}

// isMove reports whether call moves a waiter (see the root's moves.go):
// w.moveLocked(...) or w.settleLocked(...), on a waiter named w or victim.
func isMove(call *ast.CallExpr) bool {
	sel, ok := call.Fun.(*ast.SelectorExpr)
	if !ok || sel.Sel.Name != "moveLocked" && sel.Sel.Name != "settleLocked" {
		return false
	}
	id, ok := sel.X.(*ast.Ident)
	return ok && (id.Name == "w" || id.Name == "victim")
}

// ranked returns the n largest of m as "name count", largest first.
func ranked(m map[string]int, n int) []string {
	keys := make([]string, 0, len(m))
	for k := range m {
		keys = append(keys, k)
	}
	sort.Slice(keys, func(i, j int) bool { return m[keys[i]] > m[keys[j]] || m[keys[i]] == m[keys[j]] && keys[i] < keys[j] })
	var out []string
	for _, k := range keys[:min(n, len(keys))] {
		out = append(out, fmt.Sprintf("%s %d", k, m[k]))
	}
	return out
}

func recv(e ast.Expr) string {
	switch e := e.(type) {
	case *ast.StarExpr:
		return recv(e.X)
	case *ast.Ident:
		return e.Name
	case *ast.IndexExpr:
		return recv(e.X)
	}
	return "?"
}

func fail(err error) {
	fmt.Fprintln(os.Stderr, "coresize:", err)
	os.Exit(1)
}
