package main

import (
	"fmt"
	"go/ast"
	"go/parser"
	"go/token"
	"path/filepath"
	"sort"
	"strings"
)

// surface is a package's exported API, counted the way a reader of its
// documentation meets it: the package-level names (constants, variables,
// functions, types), then those with the exported methods of its types,
// then those with the exported fields of its structs.
type surface struct {
	names, methods, fields []string
}

// exportedSurface reads the non-test Go files of the package in dir.
func exportedSurface(dir string) (surface, error) {
	var s surface
	files, err := filepath.Glob(filepath.Join(dir, "*.go"))
	if err != nil {
		return s, err
	}
	fset := token.NewFileSet()
	for _, path := range files {
		if strings.HasSuffix(path, "_test.go") {
			continue
		}
		f, err := parser.ParseFile(fset, path, nil, parser.SkipObjectResolution)
		if err != nil {
			return s, err
		}
		if f.Name.Name == "main" {
			continue
		}
		for _, d := range f.Decls {
			s.add(d)
		}
	}
	for _, l := range [][]string{s.names, s.methods, s.fields} {
		sort.Strings(l)
	}
	return s, nil
}

func (s *surface) add(d ast.Decl) {
	switch d := d.(type) {
	case *ast.FuncDecl:
		if !d.Name.IsExported() {
			return
		}
		if d.Recv == nil {
			s.names = append(s.names, d.Name.Name)
			return
		}
		if recv := receiverName(d.Recv.List[0].Type); ast.IsExported(recv) {
			s.methods = append(s.methods, recv+"."+d.Name.Name)
		}
	case *ast.GenDecl:
		for _, spec := range d.Specs {
			switch sp := spec.(type) {
			case *ast.ValueSpec:
				for _, n := range sp.Names {
					if n.IsExported() {
						s.names = append(s.names, n.Name)
					}
				}
			case *ast.TypeSpec:
				if !sp.Name.IsExported() {
					continue
				}
				s.names = append(s.names, sp.Name.Name)
				if st, ok := sp.Type.(*ast.StructType); ok && sp.Assign == 0 {
					for _, f := range st.Fields.List {
						for _, n := range fieldNames(f) {
							if ast.IsExported(n) {
								s.fields = append(s.fields, sp.Name.Name+"."+n)
							}
						}
					}
				}
			}
		}
	}
}

// receiverName is the name of a method's receiver type, without pointer
// or type parameters.
func receiverName(e ast.Expr) string {
	switch e := e.(type) {
	case *ast.StarExpr:
		return receiverName(e.X)
	case *ast.IndexExpr:
		return receiverName(e.X)
	case *ast.IndexListExpr:
		return receiverName(e.X)
	case *ast.Ident:
		return e.Name
	}
	return ""
}

// fieldNames are a struct field's names; an embedded field's is its type's.
func fieldNames(f *ast.Field) []string {
	if len(f.Names) > 0 {
		var out []string
		for _, n := range f.Names {
			out = append(out, n.Name)
		}
		return out
	}
	switch t := f.Type.(type) {
	case *ast.StarExpr:
		return fieldNames(&ast.Field{Type: t.X})
	case *ast.SelectorExpr:
		return []string{t.Sel.Name}
	case *ast.Ident:
		return []string{t.Name}
	}
	return nil
}

// printSurface prints the counts of dir's exported surface and, with
// list, every name.
func printSurface(dir string, list bool) error {
	s, err := exportedSurface(dir)
	if err != nil {
		return err
	}
	n, m := len(s.names), len(s.methods)
	fmt.Printf("%s: %d exported names, %d with methods, %d with struct fields\n", dir, n, n+m, n+m+len(s.fields))
	if list {
		for _, l := range [][]string{s.names, s.methods, s.fields} {
			fmt.Println("  " + strings.Join(l, " "))
		}
	}
	return nil
}
