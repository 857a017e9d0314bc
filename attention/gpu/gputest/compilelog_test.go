package gputest

import (
	"bytes"
	"os"
	"path/filepath"
	"strings"
	"testing"

	_ "github.com/gosling-ai/gosling/attention/gpu" // registers the attention kernels
	"github.com/gosling-ai/gosling/device/cuda"
)

// TestNVRTCHopperLog compiles every kernel file for sm_90a (NVRTC needs no
// GPU, only libnvrtc) and fails where ptxas reports that it serialized
// wgmma instructions: such a kernel still computes the right answer, so no
// numeric test notices, but each of its asynchronous MMAs then waits for
// the one before, which undoes the warpgroup pipelining it was written for.
func TestNVRTCHopperLog(t *testing.T) {
	nv, err := cuda.LoadNVRTC()
	if err != nil {
		t.Skipf("no NVRTC: %v", err)
	}
	srcs, err := cuda.KernelSources()
	if err != nil {
		t.Fatal(err)
	}
	target := cuda.Target{Arch: 90, CUBIN: true, Specific: true}
	// GOSLING_PTX_OUT=dir also writes each file's compute_90a PTX there,
	// for ptxas by hand (ptxas -arch=sm_90a -v -e <kernel> file.ptx
	// compiles one kernel in seconds).
	ptxDir := os.Getenv("GOSLING_PTX_OUT")
	for _, src := range srcs {
		t.Run(src.Name, func(t *testing.T) {
			t.Parallel()
			if ptxDir != "" {
				ptx, _, err := nv.Compile(src.Name, src.Source, src.Headers, cuda.Target{Arch: 90, Specific: true}, src.Options())
				if err != nil {
					t.Fatal(err)
				}
				if err := os.WriteFile(filepath.Join(ptxDir, strings.TrimSuffix(src.Name, ".cu")+".ptx"), bytes.TrimRight(ptx, "\x00"), 0o644); err != nil {
					t.Fatal(err)
				}
				return
			}
			// ptxas's register and spill lines too, where this NVRTC
			// passes options on to it.
			opts := src.Options()
			_, log, err := nv.Compile(src.Name, src.Source, src.Headers, target, append(opts[:len(opts):len(opts)], "--ptxas-options=-v"))
			if err != nil {
				_, log, err = nv.Compile(src.Name, src.Source, src.Headers, target, opts)
			}
			if err != nil {
				t.Fatal(err)
			}
			for _, line := range strings.Split(log, "\n") {
				if strings.TrimSpace(line) == "" {
					continue
				}
				t.Log(line)
				if strings.Contains(line, "wgmma.mma_async instructions are serialized") {
					t.Errorf("ptxas serialized wgmma: %s", line)
				}
			}
		})
	}
}

// TestNVRTCPrecompile, with GOSLING_PRECOMPILE_DIR set, compiles every
// kernel file for the sm_90 target into a kernel cache there (the layout
// of $XDG_CACHE_HOME/gosling/cuda), so a Hopper machine with the same
// NVRTC version loads them without compiling. Without it, it skips.
func TestNVRTCPrecompile(t *testing.T) {
	dir := os.Getenv("GOSLING_PRECOMPILE_DIR")
	if dir == "" {
		t.Skip("GOSLING_PRECOMPILE_DIR is not set")
	}
	nv, err := cuda.LoadNVRTC()
	if err != nil {
		t.Skipf("no NVRTC: %v", err)
	}
	target, err := nv.TargetFor(90)
	if err != nil {
		t.Fatal(err)
	}
	n, err := cuda.Precompile(nv, &cuda.KernelCache{Dir: dir}, target)
	if err != nil {
		t.Fatal(err)
	}
	t.Logf("NVRTC %s, %s: %d files compiled into %s", nv.Version(), target.Option(), n, dir)
}
