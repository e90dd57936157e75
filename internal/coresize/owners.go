package main

import (
	"fmt"
	"go/ast"
	"go/token"
	"go/types"
	"path/filepath"
	"slices"
	"sort"
)

// An owner is a concern type that owns its fields: they change only in its
// own files (through its methods, or the goroutine it runs), never where
// another type's code reaches in, though anyone may read them; New
// (throttler.go) sets them up. A change is an assignment, an increment, a
// delete or clear, or a call of a pointer method on the field itself (an
// atomic's Store, a slice's own method); a call of the owner's own methods
// is how the others ask for one.
type owner struct {
	typ   string   // the type's name, in one of riderPackages
	files []string // its files, from the module root
}

// owners is the table the check holds the library to. (owed is held to its
// file for reads too: see riders.)
var owners = []owner{
	{"workerState", []string{"worker.go", "overload.go"}},
	{"sharedState", []string{"shared.go", "margin.go"}},
	{"health", []string{"heal.go", "health.go"}},
	{"fallback", []string{"fallback.go", "health.go"}},
	{"upkeep", []string{"upkeep.go"}},
	{"leases", []string{"inflight.go"}},
	{"newsState", []string{"news.go"}},
	{"fairOrder", []string{"fairqueue.go"}},
	{"Known", []string{"internal/core/plan.go", "internal/core/tenants.go"}},
}

// strayWrites type-checks the library's packages under root and returns
// every place, as "file:line: Type.field", where a field of an owner in
// table changes outside the owner's files.
func strayWrites(root string, table []owner) ([]string, error) {
	files := map[string][]string{}
	for _, o := range table {
		files[o.typ] = o.files
	}
	var stray []string
	for _, dir := range riderPackages {
		fset, parsed, info, err := typeCheck(filepath.Join(root, dir))
		if err != nil {
			return nil, err
		}
		for _, f := range parsed {
			rel, _ := filepath.Rel(root, fset.Position(f.Pos()).Filename)
			rel = filepath.ToSlash(rel)
			for _, d := range f.Decls {
				fd, ok := d.(*ast.FuncDecl)
				if !ok || fd.Body == nil || (fd.Recv == nil && fd.Name.Name == "New") {
					continue
				}
				changes(fd.Body, info, func(pos token.Pos, typ, field string) {
					if own, ok := files[typ]; ok && !slices.Contains(own, rel) {
						stray = append(stray, fmt.Sprintf("%s:%d: %s.%s", rel, fset.Position(pos).Line, typ, field))
					}
				})
			}
		}
	}
	sort.Strings(stray)
	return stray, nil
}

// changes calls note for every field that body changes, with the type
// that holds it: each step of the changed expression's path of fields.
func changes(body *ast.BlockStmt, info *types.Info, note func(pos token.Pos, typ, field string)) {
	changed := func(e ast.Expr) {
		for {
			switch x := e.(type) {
			case *ast.ParenExpr:
				e = x.X
				continue
			case *ast.IndexExpr:
				e = x.X
				continue
			case *ast.SliceExpr:
				e = x.X
				continue
			case *ast.SelectorExpr:
				if s, ok := info.Selections[x]; ok && s.Kind() == types.FieldVal {
					recv := s.Recv()
					if p, ok := recv.(*types.Pointer); ok {
						recv = p.Elem()
					}
					if n, ok := recv.(*types.Named); ok {
						note(x.Sel.Pos(), n.Obj().Name(), x.Sel.Name)
					}
					if _, ok := s.Recv().(*types.Pointer); ok {
						return // through a pointer: the outer value is not changed
					}
					e = x.X
					continue
				}
			}
			return
		}
	}
	ast.Inspect(body, func(n ast.Node) bool {
		switch s := n.(type) {
		case *ast.AssignStmt:
			if s.Tok != token.DEFINE {
				for _, l := range s.Lhs {
					changed(l)
				}
			}
		case *ast.IncDecStmt:
			changed(s.X)
		case *ast.CallExpr:
			switch fun := s.Fun.(type) {
			case *ast.Ident:
				if b, ok := info.Uses[fun].(*types.Builtin); ok && (b.Name() == "delete" || b.Name() == "clear") && len(s.Args) > 0 {
					changed(s.Args[0])
				}
			case *ast.SelectorExpr:
				sel, ok := info.Selections[fun]
				if !ok || sel.Kind() != types.MethodVal {
					break
				}
				_, ptrMethod := sel.Obj().Type().(*types.Signature).Recv().Type().(*types.Pointer)
				_, ptrValue := sel.Recv().(*types.Pointer)
				if ptrMethod && !ptrValue && sel.Obj().Name() != "Load" { // an atomic's Load reads
					changed(fun.X) // the method changes the field it is called on
				}
			}
		}
		return true
	})
}
