package main

import (
	"bufio"
	"fmt"
	"go/ast"
	"go/parser"
	"go/token"
	"os"
	"os/exec"
	"path/filepath"
	"sort"
	"strconv"
	"strings"
)

// module is the library's module path, which prefixes the cover
// profile's file names.
const module = "github.com/go-throttler/throttler/"

// walkOneWait measures the walk of one Wait from the face to Redis and
// back: the functions (and their files) of the library's packages that the
// root's TestWalk runs more often when it waits once, uncontended, after
// New than when it only makes the Throttler. It runs go test twice with
// coverage counts, from the module root.
func walkOneWait() error {
	counts := map[string]map[string]int{} // run -> block -> count
	for _, run := range []string{"new", "wait"} {
		profile := filepath.Join(os.TempDir(), "coresize-walk-"+run+".out")
		cmd := exec.Command("go", "test", "-count=1", "-run", "^TestWalk$", "-walk", run, "-covermode=count",
			"-coverpkg=.,./internal/core,./internal/redisstore", "-coverprofile="+profile, ".")
		cmd.Stderr = os.Stderr
		if out, err := cmd.Output(); err != nil {
			return fmt.Errorf("%v: %s", err, out)
		}
		c, err := readProfile(profile)
		if err != nil {
			return err
		}
		counts[run] = c
		os.Remove(profile)
	}
	funcs := map[string]bool{}
	files := map[string]bool{}
	for block, n := range counts["wait"] {
		if n <= counts["new"][block] {
			continue
		}
		file, line := blockStart(block)
		fn, err := enclosingFunc(file, line)
		if err != nil {
			return err
		}
		funcs[file+" "+fn] = true
		files[file] = true
	}
	var list []string
	for f := range funcs {
		list = append(list, f)
	}
	sort.Strings(list)
	fmt.Printf("one Wait, uncontended (TestWalk): %d functions in %d files\n", len(funcs), len(files))
	for _, f := range list {
		fmt.Println("  " + f)
	}
	return nil
}

// readProfile reads a cover profile in count mode: block -> count.
func readProfile(path string) (map[string]int, error) {
	f, err := os.Open(path)
	if err != nil {
		return nil, err
	}
	defer f.Close()
	out := map[string]int{}
	sc := bufio.NewScanner(f)
	for sc.Scan() {
		fields := strings.Fields(sc.Text())
		if len(fields) != 3 || strings.HasPrefix(fields[0], "mode:") {
			continue
		}
		n, err := strconv.Atoi(fields[2])
		if err != nil {
			return nil, err
		}
		out[fields[0]] += n
	}
	return out, sc.Err()
}

// blockStart returns the file (from the module root) and the first line
// of a profile block, "module/file.go:l0.c0,l1.c1".
func blockStart(block string) (string, int) {
	file, pos, _ := strings.Cut(block, ":")
	line, _, _ := strings.Cut(pos, ".")
	n, _ := strconv.Atoi(line)
	return strings.TrimPrefix(file, module), n
}

// parsed holds the files enclosingFunc has read, each with its file set.
var parsed = map[string]parsedFile{}

type parsedFile struct {
	fset *token.FileSet
	f    *ast.File
}

// enclosingFunc names the function (Recv.Name, or Name) of file that holds
// line; a function literal counts as the function it is written in.
func enclosingFunc(file string, line int) (string, error) {
	pf, ok := parsed[file]
	if !ok {
		pf.fset = token.NewFileSet()
		var err error
		if pf.f, err = parser.ParseFile(pf.fset, file, nil, 0); err != nil {
			return "", err
		}
		parsed[file] = pf
	}
	fset, f := pf.fset, pf.f
	for _, d := range f.Decls {
		fd, ok := d.(*ast.FuncDecl)
		if !ok {
			continue
		}
		if fset.Position(fd.Pos()).Line <= line && line <= fset.Position(fd.End()).Line {
			if fd.Recv != nil && len(fd.Recv.List) > 0 {
				return recv(fd.Recv.List[0].Type) + "." + fd.Name.Name, nil
			}
			return fd.Name.Name, nil
		}
	}
	return "?", nil
}
