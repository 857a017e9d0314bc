package cuda

import (
	"errors"
	"path/filepath"
	"slices"
	"strings"
	"testing"
)

// fakeEnv is a process with the given variables and files.
func fakeEnv(vars map[string]string, files []string) searchEnv {
	return searchEnv{
		Getenv: func(k string) string { return vars[k] },
		Glob: func(pattern string) ([]string, error) {
			var out []string
			for _, f := range files {
				if ok, _ := filepath.Match(pattern, f); ok {
					out = append(out, f)
				}
			}
			slices.Sort(out) // as filepath.Glob
			return out, nil
		},
		Home:   "/home/u",
		GOARCH: "amd64",
	}
}

func TestSearchPathsOrder(t *testing.T) {
	env := fakeEnv(map[string]string{
		"CUDA_HOME":   "/opt/cuda-13.1",
		"VIRTUAL_ENV": "/venv",
		"PATH":        "/usr/bin:/opt/torch/.venv/bin",
	}, []string{
		"/venv/lib/python3.12/site-packages",
		"/venv/lib/python3.12/site-packages/nvidia/cublas/lib",
		"/venv/lib/python3.12/site-packages/nvidia/cu13/lib",
		"/opt/torch/.venv/lib/python3.12/site-packages",
		"/opt/torch/.venv/lib/python3.12/site-packages/nvidia/cuda_nvrtc/lib",
		"/home/u/.local/lib/python3.11/site-packages",
		"/usr/lib/python3/dist-packages", // not python3*/: "python3" alone matches too
	})
	got := searchPaths(LibNVRTC, env)
	want := []string{
		"libnvrtc.so.13", // the loader's own path comes first
		"/opt/cuda-13.1/lib64/libnvrtc.so.13",
		"/opt/cuda-13.1/lib/libnvrtc.so.13",
		"/usr/local/cuda/lib64/libnvrtc.so.13",
		"/usr/local/nvidia/lib64/libnvrtc.so.13",
		"/usr/lib/x86_64-linux-gnu/libnvrtc.so.13",
		"/usr/lib64/libnvrtc.so.13",
		"/usr/lib/wsl/lib/libnvrtc.so.13",
		"/venv/lib/python3.12/site-packages/nvidia/cu13/lib/libnvrtc.so.13",
		"/venv/lib/python3.12/site-packages/nvidia/cublas/lib/libnvrtc.so.13",
		"/opt/torch/.venv/lib/python3.12/site-packages/nvidia/cuda_nvrtc/lib/libnvrtc.so.13",
	}
	if !slices.Equal(got, want) {
		t.Errorf("search paths:\n got %q\nwant %q", got, want)
	}
}

func TestSearchPathsMinimalEnv(t *testing.T) {
	env := fakeEnv(nil, nil)
	env.GOARCH = "arm64"
	got := searchPaths(LibCUDA, env)
	if got[0] != LibCUDA {
		t.Fatalf("first path %q, want the bare soname", got[0])
	}
	if !slices.Contains(got, "/usr/lib/aarch64-linux-gnu/libcuda.so.1") {
		t.Errorf("arm64 multiarch folder missing from %q", got)
	}
	for _, p := range got {
		if strings.Contains(p, "stubs") {
			t.Errorf("%q: the toolkit's stub libcuda must never be loaded", p)
		}
	}
}

func TestSitePackagesFromPythonPath(t *testing.T) {
	env := fakeEnv(map[string]string{"PYTHONPATH": "/tmp/site:/other"}, []string{"/tmp/site/nvidia/cublas/lib"})
	dirs := libraryDirs(env)
	if !slices.Contains(dirs, "/tmp/site/nvidia/cublas/lib") {
		t.Errorf("PYTHONPATH wheel folder missing from %q", dirs)
	}
}

func TestOpenLibrary(t *testing.T) {
	env := fakeEnv(map[string]string{"CUDA_HOME": "/cuda"}, nil)
	notFound := func(p string) error {
		return errors.New(p + ": cannot open shared object file: No such file or directory")
	}

	t.Run("first success wins", func(t *testing.T) {
		var tried []string
		h, path, err := openLibrary(LibCUBLAS, env, func(p string) (uintptr, error) {
			tried = append(tried, p)
			if p == "/cuda/lib64/libcublas.so.13" {
				return 42, nil
			}
			return 0, notFound(p)
		})
		if err != nil || h != 42 || path != "/cuda/lib64/libcublas.so.13" {
			t.Fatalf("got %d %q %v", h, path, err)
		}
		if !slices.Equal(tried, []string{"libcublas.so.13", "/cuda/lib64/libcublas.so.13"}) {
			t.Errorf("tried %q", tried)
		}
	})

	t.Run("driver missing", func(t *testing.T) {
		_, _, err := openLibrary(LibCUDA, env, func(p string) (uintptr, error) { return 0, notFound(p) })
		msg := err.Error()
		for _, want := range []string{"no NVIDIA driver: libcuda.so.1 not found", "the loader path", "/cuda/lib64", "/usr/local/cuda/lib64", "; use --device cpu"} {
			if !strings.Contains(msg, want) {
				t.Errorf("message %q lacks %q", msg, want)
			}
		}
		if strings.Contains(msg, "No such file") || strings.Contains(msg, "\n") {
			t.Errorf("plain absence should give one clean sentence, got %q", msg)
		}
		if !errors.Is(err, ErrNoLibrary) {
			t.Error("errors.Is(err, ErrNoLibrary) = false")
		}
	})

	t.Run("other errors are shown", func(t *testing.T) {
		_, _, err := openLibrary(LibNVRTC, env, func(p string) (uintptr, error) {
			if p == "libnvrtc.so.13" {
				return 0, errors.New("libnvrtc-builtins.so.13.0: cannot open shared object file: No such file or directory")
			}
			return 0, notFound(p)
		})
		if !strings.Contains(err.Error(), "libnvrtc-builtins") {
			t.Errorf("a missing dependency must be reported: %v", err)
		}
		if !strings.Contains(err.Error(), "CUDA_HOME") {
			t.Errorf("the error should say what to do: %v", err)
		}
	})
}

// Without a driver (CI), Open must fail with the one sentence users see.
func TestOpenWithoutDriver(t *testing.T) {
	if DriverAvailable() == nil {
		t.Skip("a CUDA driver is present")
	}
	_, err := Open(0)
	if err == nil {
		t.Fatal("Open succeeded without a driver")
	}
	if !strings.Contains(err.Error(), "--device cpu") {
		t.Errorf("error %q does not tell the user to use --device cpu", err)
	}
	t.Logf("Open(0): %v", err)
}
