package redisstore

import (
	"crypto/sha1"
	"encoding/hex"
	"go/ast"
	"go/parser"
	"go/token"
	"io/fs"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"testing"
)

// Scripts lists every script of the package: each call of NewScript (or
// NewScriptServerSHA) in the package's source is the value of a
// package-level variable, and Scripts lists that variable under its name
// with the text of that call (the same digest). No other package of the
// module makes or sends a script of its own.
func TestScriptsListsEveryScript(t *testing.T) {
	declared := scriptVars(t)
	listed := Scripts()
	for name, src := range declared {
		s, ok := listed[name]
		switch {
		case !ok:
			t.Errorf("%s is a script of the package, missing from Scripts", name)
		case s == nil || s.Hash() != sha1Hex(src):
			t.Errorf("Scripts()[%q] is not the script of the variable %s (its digest differs)", name, name)
		}
	}
	for name := range listed {
		if _, ok := declared[name]; !ok {
			t.Errorf("Scripts lists %s, which no package-level variable of the package declares with NewScript", name)
		}
	}
	if len(declared) < 12 {
		t.Fatalf("found %d scripts in the source, fewer than the 12 the package had: the scan reads nothing", len(declared))
	}
	for _, f := range elsewhere(t) {
		t.Errorf("%s makes or sends a script of its own: move it into redisstore and Scripts", f)
	}
}

// scriptVars returns the package's script variables, with their text, and
// fails t for a NewScript call that is not one's value or whose text is
// not a literal.
func scriptVars(t *testing.T) map[string]string {
	t.Helper()
	files, err := filepath.Glob("*.go")
	if err != nil {
		t.Fatal(err)
	}
	vars := map[string]string{}
	fset := token.NewFileSet()
	var parsed []*ast.File
	consts := map[string]ast.Expr{} // package-level constants, by name
	for _, name := range files {
		if strings.HasSuffix(name, "_test.go") {
			continue
		}
		f, err := parser.ParseFile(fset, name, nil, 0)
		if err != nil {
			t.Fatal(err)
		}
		parsed = append(parsed, f)
		for _, d := range f.Decls {
			if gd, ok := d.(*ast.GenDecl); ok && gd.Tok == token.CONST {
				for _, spec := range gd.Specs {
					vs := spec.(*ast.ValueSpec)
					for i, v := range vs.Values {
						consts[vs.Names[i].Name] = v
					}
				}
			}
		}
	}
	for _, f := range parsed {
		held := map[ast.Node]bool{} // the calls that are a variable's value
		for _, d := range f.Decls {
			gd, ok := d.(*ast.GenDecl)
			if !ok || gd.Tok != token.VAR {
				continue
			}
			for _, spec := range gd.Specs {
				vs := spec.(*ast.ValueSpec)
				for i, v := range vs.Values {
					if newScript(v) && i < len(vs.Names) {
						held[v] = true
						vars[vs.Names[i].Name] = scriptText(t, fset, v.(*ast.CallExpr), consts)
					}
				}
			}
		}
		ast.Inspect(f, func(n ast.Node) bool {
			if e, ok := n.(ast.Expr); ok && newScript(e) && !held[n] {
				t.Errorf("%s: a script that is not the value of a package-level variable, which Scripts cannot list", fset.Position(n.Pos()))
			}
			return true
		})
	}
	return vars
}

// newScript reports whether e calls NewScript or NewScriptServerSHA.
func newScript(e ast.Expr) bool {
	call, ok := e.(*ast.CallExpr)
	if !ok {
		return false
	}
	sel, ok := call.Fun.(*ast.SelectorExpr)
	return ok && (sel.Sel.Name == "NewScript" || sel.Sel.Name == "NewScriptServerSHA")
}

// scriptText returns the text a NewScript call is given: string literals
// and package-level constants (consts) made of them, joined with +.
func scriptText(t *testing.T, fset *token.FileSet, call *ast.CallExpr, consts map[string]ast.Expr) string {
	t.Helper()
	if len(call.Args) == 1 {
		if s, ok := literalText(call.Args[0], consts); ok {
			return s
		}
	}
	t.Errorf("%s: the script's text is not made of string literals: this test cannot compare it with Scripts'", fset.Position(call.Pos()))
	return ""
}

// literalText returns the string e stands for, when it is a string
// literal, a constant of consts that is one, or a sum of them.
func literalText(e ast.Expr, consts map[string]ast.Expr) (string, bool) {
	switch e := e.(type) {
	case *ast.BasicLit:
		if e.Kind != token.STRING {
			return "", false
		}
		s, err := strconv.Unquote(e.Value)
		return s, err == nil
	case *ast.Ident:
		if v, ok := consts[e.Name]; ok {
			return literalText(v, consts)
		}
	case *ast.BinaryExpr:
		if e.Op == token.ADD {
			x, ok1 := literalText(e.X, consts)
			y, ok2 := literalText(e.Y, consts)
			return x + y, ok1 && ok2
		}
	}
	return "", false
}

// elsewhere returns the module's Go files, but for tests, redisstore and
// internal/redistest (a test helper that runs the scripts it is given),
// that make a script or send one (EVAL, EVALSHA, FCALL); nested modules
// (the bench, throttlerotel, the examples) are not the library.
func elsewhere(t *testing.T) []string {
	t.Helper()
	root := filepath.Join("..", "..")
	skip := []string{filepath.Join(root, "internal", "redisstore"), filepath.Join(root, "internal", "redistest")}
	var found []string
	err := filepath.WalkDir(root, func(path string, d fs.DirEntry, err error) error {
		if err != nil {
			return err
		}
		if d.IsDir() {
			if path != root && (slices.Contains(skip, path) || strings.HasPrefix(d.Name(), ".") || d.Name() == "testdata" || exists(filepath.Join(path, "go.mod"))) {
				return filepath.SkipDir
			}
			return nil
		}
		if !strings.HasSuffix(path, ".go") || strings.HasSuffix(path, "_test.go") {
			return nil
		}
		b, err := os.ReadFile(path)
		if err != nil {
			return err
		}
		for _, sign := range []string{"NewScript", ".Eval(", ".EvalSha(", ".EvalRO(", ".EvalShaRO(", ".FCall", `"eval`, `"fcall`} {
			if strings.Contains(string(b), sign) {
				found = append(found, path+" ("+sign+")")
			}
		}
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	return found
}

func exists(path string) bool {
	_, err := os.Stat(path)
	return err == nil
}

func sha1Hex(s string) string {
	h := sha1.Sum([]byte(s))
	return hex.EncodeToString(h[:])
}
